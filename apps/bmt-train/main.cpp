// bmt-train: trains a GPT with ZeRO-3 from the command line.
//
//   mpirun -np 4 bmt-train --model gpt2-124m --dtype bf16 --batch 32 --seq 1024 --steps 1000 \
//          --data 'data/fineweb_train_*.bin' --metrics run.jsonl --save ckpt --save-every 200
//
// Bad input (an unknown flag or preset, a batch that does not split over the ranks, a missing data
// file, ranks started with different options) ends every rank with a one-line error and exit code 2.
// SIGUSR1 or SIGTERM stops every rank after the same step: exit code 75 with a checkpoint saved
// there, 76 without --save (stop_signal.hpp).
#include <bmtrain/bmtrain.hpp>

#include <cstdio>
#include <new>

#include "job_exit.hpp"
#include "options.hpp"
#include "trainer.hpp"

int main(int argc, char** argv) {
  try {
    bmt::init_distributed(&argc, &argv);
  } catch (const bmt::Error& e) {  // a bad environment variable, agreed on by every rank
    std::fprintf(stderr, "bmt-train: error: %s\n", e.what());
    return 2;
  }
  bmt_train::JobExit job_exit;
  int code = 0;
  std::string error;
  try {
    bmt_train::TrainOptions options;
    bool run = false;
    // Ranks of an MPMD launch get different arguments: one rank's bad flag must stop them all.
    bmt::run_on_every_rank(MPI_COMM_NULL, [&] { run = bmt_train::parse_options(argc, argv, options, code); });
    const int world = bmt::world_size(), first_help = bmt::lowest_rank_where(MPI_COMM_NULL, !run);
    const int first_run = bmt::lowest_rank_where(MPI_COMM_NULL, run);
    BMT_REQUIRE(first_help == world || first_run == world,
                "--help: expected on every rank or on none, found it on rank " << first_help << " and not on rank "
                                                                              << first_run);
    if (run) code = bmt_train::train(options);
  } catch (const bmt::Error& e) {
    error = e.what();
    code = 2;
  } catch (const std::bad_alloc&) {
    error = bmt::kOutOfHostMemory;
    code = 2;
  } catch (const std::exception& e) {
    error = std::string("internal error: ") + e.what();
    code = 1;
  }
  code = job_exit.leave(code, error);
  bmt::finalize();
  return code;
}
