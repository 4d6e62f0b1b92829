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
  // The runtime starts with the process mesh the options ask for (--shard-group), so MPI starts
  // first and the options are read and agreed on over its world; the runtime then finds MPI
  // started, and leaves it for the end of main to finalize.
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "bmt-train: error: MPI_Init_thread failed\n");
    return 2;
  }
  int code = 0;
  {
    bmt_train::JobExit job_exit;
    std::string error;
    try {
      bmt_train::TrainOptions options;
      bool run = false;
      // Ranks of an MPMD launch get different arguments: one rank's bad flag must stop them all.
      bmt::run_on_every_rank(MPI_COMM_WORLD, [&] { run = bmt_train::parse_options(argc, argv, options, code); });
      int world = 1;
      BMT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
      const int first_help = bmt::lowest_rank_where(MPI_COMM_WORLD, !run);
      const int first_run = bmt::lowest_rank_where(MPI_COMM_WORLD, run);
      BMT_REQUIRE(first_help == world || first_run == world,
                  "--help: expected on every rank or on none, found it on rank " << first_help << " and not on rank "
                                                                                << first_run);
      if (run) {
        // A bad environment variable or mesh size is agreed on by every rank.
        bmt::init_distributed(&argc, &argv, bmt_train::init_options(options));
        code = bmt_train::train(options);
      }
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
  }
  bmt::finalize();
  MPI_Finalize();
  return code;
}
