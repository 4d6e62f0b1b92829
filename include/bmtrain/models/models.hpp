#pragma once
// The models layer: GPT-2 and Llama built from bmtrain's layers, their one configuration
// (presets, Hugging Face config.json in and out), their Hugging Face tensor names, and what they
// will hold in memory. docs/MODELS.md describes them.
#include "bmtrain/models/block_rows.hpp"
#include "bmtrain/models/causal_lm.hpp"
#include "bmtrain/models/gpt2_block.hpp"
#include "bmtrain/models/hf_config.hpp"
#include "bmtrain/models/llama_block.hpp"
#include "bmtrain/models/memory_plan.hpp"
#include "bmtrain/models/model_config.hpp"
#include "bmtrain/models/recompute_plan.hpp"
