// MPI backend of Communicator: host buffers. 16-bit floats travel as MPI_UINT16_T and are reduced
// by user-defined operators that accumulate each pair in float.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "bmtrain/runtime/communicator.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/half.hpp"
#include "bmtrain/runtime/stream.hpp"
#include "runtime_internal.hpp"

namespace bmt {

namespace {

MPI_Op g_bf16_sum = MPI_OP_NULL, g_bf16_max = MPI_OP_NULL;
MPI_Op g_f16_sum = MPI_OP_NULL, g_f16_max = MPI_OP_NULL;

template <class Half, bool kMax>
void reduce_half(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = Half::to_float(a[i]), y = Half::to_float(b[i]);
    b[i] = Half::from_float(kMax ? std::max(x, y) : x + y);
  }
}

MPI_Op mpi_op(DType t, ReduceOp op) {
  const bool max = op == ReduceOp::max;
  switch (t) {
    case DType::bf16: return max ? g_bf16_max : g_bf16_sum;
    case DType::f16: return max ? g_f16_max : g_f16_sum;
    default: return max ? MPI_MAX : MPI_SUM;
  }
}

// Divides the `count` elements at buf by n, for ReduceOp::avg (MPI has no average).
void divide(void* buf, std::size_t count, DType t, int n) {
  const float inv = 1.0f / static_cast<float>(n);
  switch (t) {
    case DType::f32: {
      auto* p = static_cast<float*>(buf);
      for (std::size_t i = 0; i < count; ++i) p[i] *= inv;
      break;
    }
    case DType::bf16: case DType::f16: {
      auto* p = static_cast<std::uint16_t*>(buf);
      for (std::size_t i = 0; i < count; ++i)
        p[i] = t == DType::bf16 ? bf16_t::from_float(bf16_t::to_float(p[i]) * inv)
                                : f16_t::from_float(f16_t::to_float(p[i]) * inv);
      break;
    }
    case DType::i32: { auto* p = static_cast<std::int32_t*>(buf); for (std::size_t i = 0; i < count; ++i) p[i] /= n; break; }
    case DType::i64: { auto* p = static_cast<std::int64_t*>(buf); for (std::size_t i = 0; i < count; ++i) p[i] /= n; break; }
    case DType::u16: { auto* p = static_cast<std::uint16_t*>(buf); for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<std::uint16_t>(p[i] / n); break; }
    case DType::u8: { auto* p = static_cast<std::uint8_t*>(buf); for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<std::uint8_t>(p[i] / n); break; }
    case DType::f8e4m3: case DType::f8e5m2: break;  // refused by mpi_datatype
  }
}

// MPI takes int counts. A count above this is refused (not split) so that no call ever truncates it.
constexpr std::size_t kMaxChunk = std::size_t(1) << 30;

int checked_count(std::size_t count, const char* what) {
  BMT_REQUIRE(count <= kMaxChunk, what << ": expected at most " << kMaxChunk
                                        << " elements per rank in one MPI call, found " << count);
  return static_cast<int>(count);
}

// Runs one MPI operation to completion on the calling thread (a stream's). With
// MPI_THREAD_MULTIPLE that is simply the blocking call. Below it, one thread at a time may be inside
// MPI, and no thread may keep that turn while it waits for peers: rank 0's gather stream could hold
// it in an all-gather that rank 1 cannot join because rank 1's scatter stream holds rank 1's turn in
// a reduce-scatter that rank 0's scatter stream cannot join. So there the operation is started
// non-blocking and polled, taking the turn only for each call into MPI.
bool mpi_thread_multiple() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided == MPI_THREAD_MULTIPLE;
}

std::mutex& mpi_turn() {
  static std::mutex mutex;
  return mutex;
}

template <class Blocking, class Start>
void run_mpi(bool multiple, Blocking&& blocking, Start&& start) {
  if (multiple) {
    blocking();
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard<std::mutex> turn(mpi_turn());
    start(&request);
  }
  for (;;) {
    int done = 0;
    {
      std::lock_guard<std::mutex> turn(mpi_turn());
      BMT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    }
    if (done) return;
    std::this_thread::yield();
  }
}

bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return an && bn && pa < pb + bn && pb < pa + an;
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm parent) {
    BMT_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
    BMT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    BMT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    BMT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    multiple_ = mpi_thread_multiple();
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  const char* backend() const override { return "mpi"; }

  void all_gather(const void* send, void* recv, std::size_t count, DType t, Stream& s) override {
    const int n = checked_count(count, "all_gather");
    s.launch([=] {
      const std::size_t bytes = count * dtype_size(t);
      const void* src = send;
      if (send == static_cast<char*>(recv) + rank_ * bytes) src = MPI_IN_PLACE;
      const MPI_Datatype dt = mpi_datatype(t);
      run_mpi(multiple_, [&] { BMT_MPI_CHECK(MPI_Allgather(src, n, dt, recv, n, dt, comm_)); },
              [&](MPI_Request* r) { BMT_MPI_CHECK(MPI_Iallgather(src, n, dt, recv, n, dt, comm_, r)); });
    });
  }

  void reduce_scatter(const void* send, void* recv, std::size_t count, DType t, ReduceOp op,
                      Stream& s) override {
    const int n = checked_count(count, "reduce_scatter");
    s.launch([=] {
      const std::size_t bytes = count * dtype_size(t);
      std::vector<char> copy;
      const void* src = send;
      if (overlaps(send, bytes * size_, recv, bytes)) {  // NCCL-style in place: copy the input
        copy.assign(static_cast<const char*>(send), static_cast<const char*>(send) + bytes * size_);
        src = copy.data();
      }
      const MPI_Datatype dt = mpi_datatype(t);
      const MPI_Op mop = mpi_op(t, op);
      run_mpi(multiple_, [&] { BMT_MPI_CHECK(MPI_Reduce_scatter_block(src, recv, n, dt, mop, comm_)); },
              [&](MPI_Request* r) { BMT_MPI_CHECK(MPI_Ireduce_scatter_block(src, recv, n, dt, mop, comm_, r)); });
      if (op == ReduceOp::avg) divide(recv, count, t, size_);
    });
  }

  void all_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op,
                  Stream& s) override {
    const int n = checked_count(count, "all_reduce");
    s.launch([=] {
      const void* src = send == recv ? MPI_IN_PLACE : send;
      const MPI_Datatype dt = mpi_datatype(t);
      const MPI_Op mop = mpi_op(t, op);
      run_mpi(multiple_, [&] { BMT_MPI_CHECK(MPI_Allreduce(src, recv, n, dt, mop, comm_)); },
              [&](MPI_Request* r) { BMT_MPI_CHECK(MPI_Iallreduce(src, recv, n, dt, mop, comm_, r)); });
      if (op == ReduceOp::avg) divide(recv, count, t, size_);
    });
  }

  void broadcast(void* buf, std::size_t count, DType t, int root, Stream& s) override {
    check_peer(root, "broadcast root");
    const int n = checked_count(count, "broadcast");
    s.launch([=] {
      const MPI_Datatype dt = mpi_datatype(t);
      run_mpi(multiple_, [&] { BMT_MPI_CHECK(MPI_Bcast(buf, n, dt, root, comm_)); },
              [&](MPI_Request* r) { BMT_MPI_CHECK(MPI_Ibcast(buf, n, dt, root, comm_, r)); });
    });
  }

  void send(const void* buf, std::size_t count, DType t, int peer, Stream& s) override {
    check_peer(peer, "send peer");
    const int n = checked_count(count, "send");
    s.launch([=] {
      const MPI_Datatype dt = mpi_datatype(t);
      run_mpi(multiple_, [&] { BMT_MPI_CHECK(MPI_Send(buf, n, dt, peer, 0, comm_)); },
              [&](MPI_Request* r) { BMT_MPI_CHECK(MPI_Isend(buf, n, dt, peer, 0, comm_, r)); });
    });
  }

  void recv(void* buf, std::size_t count, DType t, int peer, Stream& s) override {
    check_peer(peer, "recv peer");
    const int n = checked_count(count, "recv");
    s.launch([=] {
      const MPI_Datatype dt = mpi_datatype(t);
      run_mpi(multiple_, [&] { BMT_MPI_CHECK(MPI_Recv(buf, n, dt, peer, 0, comm_, MPI_STATUS_IGNORE)); },
              [&](MPI_Request* r) { BMT_MPI_CHECK(MPI_Irecv(buf, n, dt, peer, 0, comm_, r)); });
    });
  }

  void barrier(Stream& s) override {
    s.launch([=] {
      run_mpi(multiple_, [&] { BMT_MPI_CHECK(MPI_Barrier(comm_)); },
              [&](MPI_Request* r) { BMT_MPI_CHECK(MPI_Ibarrier(comm_, r)); });
    });
  }

 private:
  void check_peer(int peer, const char* what) const {
    BMT_REQUIRE(peer >= 0 && peer < size_,
                what << ": expected a rank in [0, " << size_ << "), found " << peer);
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool multiple_ = true;
};

}  // namespace

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::bf16: case DType::f16: case DType::u16: return MPI_UINT16_T;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::f8e4m3: case DType::f8e5m2: break;
  }
  // float8 data travels as u8: MPI has no float8 sum or maximum.
  BMT_REQUIRE(false, "MPI carries f32, bf16, f16, i32, i64, u16 and u8; found " << dtype_name(t));
}

std::vector<double> all_gather_f64(Communicator& comm, const std::vector<double>& mine, Stream& s) {
  static_assert(sizeof(double) == sizeof(std::int64_t), "a double travels as one 64-bit word");
  std::vector<double> all(mine.size() * static_cast<std::size_t>(comm.size()));
  comm.all_gather(mine.data(), all.data(), mine.size(), DType::i64, s);
  return all;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) {
  return std::make_unique<MpiCommunicator>(comm);
}

namespace detail {

void create_mpi_ops() {
  BMT_MPI_CHECK(MPI_Op_create(&reduce_half<bf16_t, false>, 1, &g_bf16_sum));
  BMT_MPI_CHECK(MPI_Op_create(&reduce_half<bf16_t, true>, 1, &g_bf16_max));
  BMT_MPI_CHECK(MPI_Op_create(&reduce_half<f16_t, false>, 1, &g_f16_sum));
  BMT_MPI_CHECK(MPI_Op_create(&reduce_half<f16_t, true>, 1, &g_f16_max));
}

void free_mpi_ops() {
  for (MPI_Op* op : {&g_bf16_sum, &g_bf16_max, &g_f16_sum, &g_f16_max})
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
}

}  // namespace detail
}  // namespace bmt
