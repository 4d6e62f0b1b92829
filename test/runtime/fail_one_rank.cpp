// A job in which rank 1 dies while every other rank waits in collectives (one queued on the gather
// stream, one on the calling thread). The runtime must end the whole job rather than leave them
// waiting. Run by expect_job_abort.sh under mpirun; the mode picks how rank 1 dies:
//   throw   an exception escapes main (the runtime's terminate handler)
//   fatal   bmt::fatal (an unrecoverable error detected by the library)
//   stream  an exception escapes work launched on a communication stream (its worker thread on
//           the host build; on CUDA launch() runs work on the caller, so it escapes main)
#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "throw";
  bmt::DistributedGuard guard(&argc, &argv);
  if (bmt::world_size() < 2) {
    std::fprintf(stderr, "fail_one_rank needs at least 2 ranks\n");
    return 2;
  }
  bmt::Context& ctx = bmt::context();
  // The gather communicator works on the memory space of the build (device memory on CUDA).
  Kokkos::View<float*, Kokkos::DefaultExecutionSpace::memory_space> x("x", 1024), y("y", 1024);
  Kokkos::deep_copy(x, 1.0f);
  if (bmt::rank() != 1) {
    ctx.gather_comm().all_reduce(x.data(), y.data(), x.extent(0), bmt::DType::f32, bmt::ReduceOp::sum,
                                 ctx.gather_stream());
    int token = 0;
    ctx.host_comm().broadcast(&token, 1, bmt::DType::i32, 1, ctx.compute_stream());  // waits for rank 1
    ctx.gather_stream().synchronize();
    std::fprintf(stderr, "rank %d: collectives completed although rank 1 never joined\n", bmt::rank());
    return 0;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the others enter their collectives
  if (mode == "fatal") BMT_FATAL("rank 1 gives up on purpose");
  if (mode == "stream") {
    ctx.scatter_stream().launch([] { throw std::runtime_error("rank 1 stream work fails on purpose"); });
    ctx.scatter_stream().synchronize();
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  throw std::runtime_error("rank 1 fails on purpose");
}
