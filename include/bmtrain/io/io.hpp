#pragma once
// The io layer: parallel safetensors files, crash-safe checkpoint directories, training-state JSON,
// model and optimizer state in and out, Hugging Face checkpoint files. docs/CHECKPOINTS.md
// describes the on-disk layout, docs/MODELS.md the Hugging Face one.
#include "bmtrain/io/checkpoint_dir.hpp"
#include "bmtrain/io/directory_lock.hpp"
#include "bmtrain/io/hf_checkpoint.hpp"
#include "bmtrain/io/json_file.hpp"
#include "bmtrain/io/safetensors_file.hpp"
#include "bmtrain/io/safetensors_header.hpp"
#include "bmtrain/io/training_state.hpp"
