// NCCL backend of Communicator: device buffers, work queued on the stream's cudaStream_t.
#include <algorithm>
#include <mutex>
#include <vector>

#include "bmtrain/runtime/communicator.hpp"
#include "bmtrain/runtime/cuda_check.hpp"
#include "bmtrain/runtime/stream.hpp"
#include "runtime_internal.hpp"

namespace bmt {

namespace {

std::mutex g_alive_mutex;
std::vector<ncclComm_t> g_alive;  // communicators to abort if this rank dies

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    case DType::u16: case DType::f8e4m3: case DType::f8e5m2: break;  // float8 data travels as u8
  }
  BMT_REQUIRE(false, "NCCL carries f32, bf16, f16, i32, i64 and u8; found " << dtype_name(t));
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(MPI_Comm comm) {
    BMT_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    BMT_MPI_CHECK(MPI_Comm_size(comm, &size_));
    ncclUniqueId id;
    if (rank_ == 0) BMT_NCCL_CHECK(ncclGetUniqueId(&id));
    BMT_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
    BMT_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    std::lock_guard<std::mutex> lock(g_alive_mutex);
    g_alive.push_back(comm_);
  }
  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(g_alive_mutex);
      g_alive.erase(std::remove(g_alive.begin(), g_alive.end(), comm_), g_alive.end());
    }
    ncclCommDestroy(comm_);
    if (token_) cudaFree(token_);
  }
  const char* backend() const override { return "nccl"; }

  void all_gather(const void* send, void* recv, std::size_t count, DType t, Stream& s) override {
    BMT_NCCL_CHECK(ncclAllGather(send, recv, count, nccl_type(t), comm_, s.native()));
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, DType t, ReduceOp op,
                      Stream& s) override {
    BMT_NCCL_CHECK(ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), comm_, s.native()));
  }
  void all_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op,
                  Stream& s) override {
    BMT_NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(t), nccl_op(op), comm_, s.native()));
  }
  void broadcast(void* buf, std::size_t count, DType t, int root, Stream& s) override {
    check_peer(root, "broadcast root");
    BMT_NCCL_CHECK(ncclBroadcast(buf, buf, count, nccl_type(t), root, comm_, s.native()));
  }
  void send(const void* buf, std::size_t count, DType t, int peer, Stream& s) override {
    check_peer(peer, "send peer");
    BMT_NCCL_CHECK(ncclSend(buf, count, nccl_type(t), peer, comm_, s.native()));
  }
  void recv(void* buf, std::size_t count, DType t, int peer, Stream& s) override {
    check_peer(peer, "recv peer");
    BMT_NCCL_CHECK(ncclRecv(buf, count, nccl_type(t), peer, comm_, s.native()));
  }
  void barrier(Stream& s) override {
    // NCCL has no barrier: an all-reduce of one element orders every rank.
    if (!token_) BMT_CUDA_CHECK(cudaMalloc(&token_, sizeof(float)));
    BMT_NCCL_CHECK(ncclAllReduce(token_, token_, 1, ncclFloat32, ncclSum, comm_, s.native()));
  }

 private:
  void check_peer(int peer, const char* what) const {
    BMT_REQUIRE(peer >= 0 && peer < size_,
                what << ": expected a rank in [0, " << size_ << "), found " << peer);
  }
  ncclComm_t comm_ = nullptr;
  float* token_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm) {
  return std::make_unique<NcclCommunicator>(comm);
}

namespace detail {
void abort_device_communicators() {
  std::unique_lock<std::mutex> lock(g_alive_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  for (ncclComm_t c : g_alive) ncclCommAbort(c);
  g_alive.clear();
}
}  // namespace detail
}  // namespace bmt
