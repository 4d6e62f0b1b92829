// Step 1 of the quick start: initialize the runtime, then every collective goes through it.
// Run: mpirun -np 2 ./hello_distributed   (or srun, or as a plain process)
#include <bmtrain/bmtrain.hpp>

#include <vector>

int main(int argc, char** argv) {
  bmt::DistributedGuard guard(&argc, &argv);
  const auto& t = bmt::context().topology();
  bmt::print_rank("bmtrain: world size ", t.world_size, ", nodes ", t.node_count, ", ranks per node ",
                  t.local_size, ", backend ", bmt::context().world_comm().backend());

  // Every rank contributes rank+1; the sum over ranks is n(n+1)/2 on every rank.
  bmt::Tensor x = bmt::full({4}, static_cast<float>(bmt::rank() + 1));
  auto& comm = bmt::context().world_comm();
  auto& stream = bmt::context().compute_stream();
  comm.all_reduce(x.data(), x.data(), 4, x.dtype(), bmt::ReduceOp::sum, stream);
  stream.synchronize();
  const float expected = t.world_size * (t.world_size + 1) / 2.0f;
  const auto got = x.to_host_floats();
  for (float v : got) {
    if (v != expected) {
      bmt::warn("all_reduce gave ", v, ", expected ", expected);
      return 1;
    }
  }
  bmt::print_on(t.world_size - 1, "rank ", bmt::rank(), " on ", t.hostname, ": all_reduce sum = ", got[0],
                " (expected ", expected, ")");
  return 0;
}
