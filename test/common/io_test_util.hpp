#pragma once
// Helpers for io tests: a temporary directory every rank of the job sees, and sub-communicators.
#include <mpi.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/runtime/context.hpp"

namespace bmt::test {

// Collective: rank 0 creates a fresh directory and tells the others; removed when the last rank
// is done with it.
class SharedTempDir {
 public:
  SharedTempDir() {
    const MPI_Comm comm = bmt::context().mpi_comm();
    std::string name;
    if (bmt::rank() == 0) {
      std::string pattern = (std::filesystem::temp_directory_path() / "bmt-io-XXXXXX").string();
      std::vector<char> buf(pattern.begin(), pattern.end());
      buf.push_back('\0');
      if (mkdtemp(buf.data())) name = buf.data();
    }
    bmt::broadcast_text(comm, name, 0);
    path_ = name;
  }
  ~SharedTempDir() {
    MPI_Barrier(bmt::context().mpi_comm());
    if (bmt::rank() == 0 && !path_.empty()) std::filesystem::remove_all(path_);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The ranks [0, size) of the world as a communicator; MPI_COMM_NULL on the others. Free with
// MPI_Comm_free when not null.
inline MPI_Comm first_ranks(int size) {
  MPI_Comm comm;
  MPI_Comm_split(bmt::context().mpi_comm(), bmt::rank() < size ? 0 : MPI_UNDEFINED, bmt::rank(), &comm);
  return comm;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void barrier() { MPI_Barrier(bmt::context().mpi_comm()); }

}  // namespace bmt::test
