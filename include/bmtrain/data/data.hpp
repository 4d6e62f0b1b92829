#pragma once
// The data layer: token files (llm.c shards, raw uint16), a synthetic Markov chain with a known
// entropy rate, and the loader that draws every global batch the same way at any world size and
// gives each rank its rows. It needs only the runtime (the rank, the seed's random streams).
#include "bmtrain/data/sequence_source.hpp"
#include "bmtrain/data/synthetic_markov.hpp"
#include "bmtrain/data/token_dataset.hpp"
#include "bmtrain/data/token_loader.hpp"
#include "bmtrain/data/window_shuffle.hpp"
