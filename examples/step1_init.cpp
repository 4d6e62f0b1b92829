// Step 1 of the quick start: enable the library by calling init_distributed first thing.
//
//   mpirun -np 2 ./step1_init      srun -n 2 ./step1_init      ./step1_init
//
// The runtime takes the topology from MPI (no launcher-specific arguments or variables), picks a
// device per rank, and sets up the communicators and streams every later step uses. All
// communication goes through it: the program makes no MPI call of its own. Exits non-zero if a
// collective gives a wrong result.
#include <bmtrain/bmtrain.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

// One line per rank, gathered on every rank with the host communicator so that rank 0 can print
// the whole table in rank order (lines printed by each rank interleave unpredictably).
void print_topology_table() {
  constexpr std::size_t kLine = 96;
  const bmt::Topology& t = bmt::context().topology();
  std::string mine = "  rank " + std::to_string(t.rank) + ": host " + t.hostname + ", node " + std::to_string(t.node) +
                     ", local rank " + std::to_string(t.local_rank) + "/" + std::to_string(t.local_size) +
                     ", device " + (t.device < 0 ? std::string("host") : std::to_string(t.device));
  mine.resize(kLine - 1);  // fixed-size records: pad or cut; the last byte stays '\0'
  std::vector<char> all(kLine * static_cast<std::size_t>(t.world_size));
  std::vector<char> record(kLine, '\0');
  std::memcpy(record.data(), mine.c_str(), mine.size());
  auto& ctx = bmt::context();
  ctx.host_comm().all_gather(record.data(), all.data(), kLine, bmt::DType::u8, ctx.compute_stream());
  ctx.compute_stream().synchronize();
  for (int r = 0; r < t.world_size; ++r) bmt::print_rank(all.data() + kLine * static_cast<std::size_t>(r));
}

}  // namespace

int main(int argc, char** argv) {
  // init_distributed(&argc, &argv, options) at the start, finalize() at the end: the guard does both.
  bmt::InitOptions options;
  options.seed = 1234;  // keys parameter initialization and dropout; the same on every rank
  bmt::DistributedGuard guard(&argc, &argv, options);

  bmt::Context& ctx = bmt::context();
  const bmt::Topology& t = ctx.topology();
  // print_rank prints on rank 0 only: one line however many ranks run.
  bmt::print_rank("bmtrain: ", t.world_size, " rank(s) on ", t.node_count, " node(s), seed ", bmt::seed(),
                  ", device collectives over ", ctx.world_comm().backend(), ", host collectives over ",
                  ctx.host_comm().backend());
  print_topology_table();

  // A collective through the runtime's world communicator, on a tensor in device memory (host
  // memory on the CPU build), queued on the compute stream: every rank gives rank + 1, the sum is
  // n (n + 1) / 2 on every rank.
  bmt::Tensor x = bmt::full({4}, static_cast<float>(bmt::rank() + 1));
  ctx.world_comm().all_reduce(x.data(), x.data(), 4, x.dtype(), bmt::ReduceOp::sum, ctx.compute_stream());
  // Each rank's id, gathered: rank r's element lands at position r.
  bmt::Tensor mine = bmt::Tensor::from_ints({bmt::rank()}, {1}, bmt::DType::i32);
  bmt::Tensor ids = bmt::Tensor::empty({t.world_size}, bmt::DType::i32);
  ctx.world_comm().all_gather(mine.data(), ids.data(), 1, bmt::DType::i32, ctx.compute_stream());
  // Collectives are asynchronous: wait for the stream before reading the results on the host.
  ctx.compute_stream().synchronize();

  const float expected = static_cast<float>(t.world_size) * static_cast<float>(t.world_size + 1) / 2.0f;
  int wrong = 0;
  for (float v : x.to_host_floats()) wrong += v != expected;
  const auto gathered = ids.to_host_ints();
  std::string gathered_text;
  for (int r = 0; r < t.world_size; ++r) {
    wrong += gathered[static_cast<std::size_t>(r)] != r;
    gathered_text += (r ? " " : "") + std::to_string(gathered[static_cast<std::size_t>(r)]);
  }
  if (wrong) bmt::warn(wrong, " wrong element(s) in the all_reduce or all_gather results");

  // print_on prints on one chosen rank: here the last, whose numbers came through the collectives.
  bmt::print_on(t.world_size - 1, "rank ", bmt::rank(), ": all_reduce sum of rank+1 = ", x.to_host_floats()[0],
                " (expected ", expected, "), all_gather of ranks = [", gathered_text, "]");
  // Agree on the verdict, so that every rank exits with the same code.
  int failed = wrong > 0;
  ctx.host_comm().all_reduce(&failed, &failed, 1, bmt::DType::i32, bmt::ReduceOp::max, ctx.compute_stream());
  ctx.compute_stream().synchronize();
  bmt::print_rank(failed ? "step 1: FAILED" : "step 1: ok");
  return failed ? 1 : 0;
}
