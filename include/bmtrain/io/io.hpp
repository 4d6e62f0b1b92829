#pragma once
// The io layer: parallel safetensors files, crash-safe checkpoint directories, training-state JSON,
// token datasets and their loader, Hugging Face checkpoints. docs/CHECKPOINTS.md describes the
// on-disk layout, docs/MODELS.md the Hugging Face one.
#include "bmtrain/io/checkpoint_dir.hpp"
#include "bmtrain/io/directory_lock.hpp"
#include "bmtrain/io/hf_checkpoint.hpp"
#include "bmtrain/io/hf_config.hpp"
#include "bmtrain/io/json_file.hpp"
#include "bmtrain/io/safetensors_file.hpp"
#include "bmtrain/io/safetensors_header.hpp"
#include "bmtrain/io/sequence_source.hpp"
#include "bmtrain/io/synthetic_markov.hpp"
#include "bmtrain/io/token_dataset.hpp"
#include "bmtrain/io/token_loader.hpp"
#include "bmtrain/io/training_state.hpp"
#include "bmtrain/io/window_shuffle.hpp"
