// bmt-train: trains a GPT with ZeRO-3 from the command line.
//
//   mpirun -np 4 bmt-train --model gpt2-124m --dtype bf16 --batch 32 --seq 1024 --steps 1000 \
//          --data 'data/fineweb_train_*.bin' --metrics run.jsonl --save ckpt --save-every 200
//
// Bad input (an unknown flag or preset, a batch that does not split over the ranks, a missing data
// file) ends every rank with a one-line error and exit code 2.
#include <bmtrain/bmtrain.hpp>

#include <cstdio>

#include "options.hpp"
#include "trainer.hpp"

int main(int argc, char** argv) {
  bmt::InitOptions init;
  bmt::init_distributed(&argc, &argv, init);
  int code = 0;
  try {
    bmt_train::TrainOptions options;
    if (bmt_train::parse_options(argc, argv, options, code)) code = bmt_train::train(options);
  } catch (const bmt_train::UsageError& e) {
    if (bmt::rank() == 0) std::fprintf(stderr, "bmt-train: error: %s\n", e.what());
    code = 2;
  } catch (const bmt::Error& e) {
    // The same input reaches every rank, so every rank fails here alike; train() agrees on setup
    // failures that could differ between ranks before any collective.
    if (bmt::rank() == 0) std::fprintf(stderr, "bmt-train: error: %s\n", e.what());
    code = 2;
  }
  bmt::finalize();
  return code;
}
