#pragma once
// Parallel reading and writing of one .safetensors file by all ranks of a job, with no gather to
// rank 0: every rank computes the same header on its own (SafetensorsHeader::build is a pure
// function of the tensor list) and touches only the byte ranges of the elements it owns. A ZeRO-3
// shard covers a range of a flattened tensor, so ranks may write disjoint parts of the same tensor;
// a file written by any number of ranks reads into any number of ranks.
//
//   // every rank, the same list:
//   bmt::io::SafetensorsWriter out("model.safetensors", {{"wte", DType::bf16, {50304, 768}}, ...});
//   out.write("wte", first, count, shard_host_ptr);   // this rank's elements [first, first + count)
//   out.close();                                       // collective: throws on every rank or none
//
//   bmt::io::SafetensorsReader in("model.safetensors");
//   in.read("wte", first, count, DType::f32, host_buf); // bf16 -> f32 is lossless, so allowed
//
// Buffers are host memory. On a CUDA build the caller stages device shards to the host first (a
// pinned buffer and one copy per shard); this layer never touches device memory.
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bmtrain/io/safetensors_header.hpp"
#include "bmtrain/runtime/half.hpp"

namespace bmt::io {

// Whether read/write may round floating values (f32 -> bf16/f16, bf16 <-> f16). Lossless
// conversions (bf16/f16 -> f32, integer widening) and identity are always allowed.
enum class Rounding { forbid, allow };


class SafetensorsWriter {
 public:
  // Collective over `comm` (MPI_COMM_NULL: the runtime's world). Every rank passes the same tensors
  // (in the same order) and metadata; a mismatch is an error on every rank. Opens `path` with MPI-IO
  // and sets it to its final size (an existing file is overwritten).
  SafetensorsWriter(const std::string& path, const std::vector<TensorSpec>& tensors,
                    const std::map<std::string, std::string>& metadata = {}, MPI_Comm comm = MPI_COMM_NULL);
  // If close() was not called (an exception on this rank), runs close()'s collective steps without
  // throwing, so ranks still in close() are not left waiting; the file is then left without a header.
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  const SafetensorsHeader& header() const { return header_; }

  // Local (no communication): writes elements [first, first + count) of the flattened tensor `name`
  // from `data`, whose element type is `dtype`: the tensor's own, a lossless source (bf16 data for
  // an f32 tensor), or, with Rounding::allow, a rounding one (f32 data for a bf16 tensor).
  // Misuse (unknown name, range outside the tensor) throws at once; an I/O failure is reported by
  // close() on every rank.
  void write(const std::string& name, std::uint64_t first, std::uint64_t count, DType dtype, const void* data,
             Rounding rounding = Rounding::forbid);
  template <class T>
  void write(const std::string& name, std::uint64_t first, std::uint64_t count, const T* data,
             Rounding rounding = Rounding::forbid) {
    write(name, first, count, bmt::dtype_of<T>(), data, rounding);
  }

  // Collective: checks that the ranks together wrote every byte of every tensor, writes the header
  // (rank 0; a file without a header is visibly incomplete), flushes to stable storage
  // (MPI_File_sync) and closes. Throws the same bmt::Error on every rank if any rank's write failed
  // or some bytes were never written.
  void close();

 private:
  void finish(bool report);
  std::string path_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_File file_ = MPI_FILE_NULL;
  SafetensorsHeader header_;
  std::string io_error_;  // first I/O failure of this rank
  // Absolute byte ranges this rank wrote, merged when adjacent.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> written_;
};

class SafetensorsReader {
 public:
  // Collective over `comm`: rank 0 reads and validates the header and shares it, so every rank
  // holds the same header or throws the same bmt::Error. Every rank opens the file for its reads.
  explicit SafetensorsReader(const std::string& path, MPI_Comm comm = MPI_COMM_NULL);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const SafetensorsHeader& header() const { return header_; }

  // Local: reads elements [first, first + count) of the flattened tensor `name` into `out` as
  // `dtype`, reading only those bytes. The file's dtype converts to `dtype` if lossless (bf16/f16 ->
  // f32, the same dtype), or with Rounding::allow if rounding (f32 -> bf16/f16).
  void read(const std::string& name, std::uint64_t first, std::uint64_t count, DType dtype, void* out,
            Rounding rounding = Rounding::forbid) const;
  template <class T>
  void read(const std::string& name, std::uint64_t first, std::uint64_t count, T* out,
            Rounding rounding = Rounding::forbid) const {
    read(name, first, count, bmt::dtype_of<T>(), out, rounding);
  }

 private:
  std::string path_;
  int fd_ = -1;
  SafetensorsHeader header_;
};

}  // namespace bmt::io
