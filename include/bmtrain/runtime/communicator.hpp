#pragma once
// Collective communication with one interface and two backends: NCCL for device buffers and MPI
// for host buffers (on the host build both are MPI). Calls are asynchronous: they are queued on the
// given stream and complete in that stream's order; record an event to wait for them.
//
// A communicator must only be used from one stream at a time: collectives on one communicator are
// matched across ranks by issue order, so two streams sharing one could pair them differently on
// different ranks. The runtime therefore gives gathers and scatters communicators of their own.
#include <cstddef>
#include <memory>
#include <vector>
#include <mpi.h>

#include "bmtrain/runtime/dtype.hpp"

namespace bmt {

class Stream;

enum class ReduceOp { sum, avg, max };
const char* reduce_op_name(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual const char* backend() const = 0;

  // recv holds size() * count elements; rank r's `count` elements land at recv + r * count.
  virtual void all_gather(const void* send, void* recv, std::size_t count, DType t, Stream& s) = 0;
  // send holds size() * count elements; rank r receives the reduction of every rank's slice r.
  virtual void reduce_scatter(const void* send, void* recv, std::size_t count, DType t, ReduceOp op,
                              Stream& s) = 0;
  virtual void all_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op,
                          Stream& s) = 0;
  virtual void broadcast(void* buf, std::size_t count, DType t, int root, Stream& s) = 0;
  // Point to point. A send holds its stream until the peer receives (as NCCL's does outside a
  // group), so a ring must order them by rank parity: even ranks send first, odd ranks receive first.
  virtual void send(const void* buf, std::size_t count, DType t, int peer, Stream& s) = 0;
  virtual void recv(void* buf, std::size_t count, DType t, int peer, Stream& s) = 0;
  virtual void barrier(Stream& s) = 0;

 protected:
  int rank_ = 0;
  int size_ = 1;
};

// Duplicates `comm` so that this communicator's traffic never matches anyone else's.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);
#ifdef BMT_ENABLE_CUDA
// Rank 0 of `comm` creates the NCCL unique id and broadcasts it over MPI.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm);
#endif

// MPI datatype used to carry elements of `t` (16-bit floats travel as MPI_UINT16_T).
MPI_Datatype mpi_datatype(DType t);

// Every rank's `mine` (the same length on every rank), rank r's at [r * mine.size(), ...): host
// doubles, which the communicators carry as 64-bit words (there is no f64 dtype). Runs on `s` like
// any collective; with the host communicator on the compute stream, whose work runs on the calling
// thread, the result is ready when the call returns.
std::vector<double> all_gather_f64(Communicator& comm, const std::vector<double>& mine, Stream& s);

}  // namespace bmt
