// Fuzz target: the safetensors header parser (bmt::io::SafetensorsHeader::parse), which reads the
// first bytes of every checkpoint and model file, and the optimizer's step count in the metadata of
// optimizer.safetensors (bmt::io::optimizer_step). The input is a whole file. Rejection must be a
// bmt::Error; an accepted header must describe tensors that tile the file's data section exactly,
// and must parse the same from its header bytes alone; an accepted step is a whole number.
#include <bmtrain/io/model_checkpoint.hpp>
#include <bmtrain/io/safetensors_header.hpp>
#include <bmtrain/runtime/error.hpp>

#include <cstdint>
#include <string_view>

#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  using bmt::io::SafetensorsHeader;
  try {
    const auto header = SafetensorsHeader::parse(file, size);
    BMT_FUZZ_CHECK(header.file_size() == size);
    BMT_FUZZ_CHECK(header.data_start() >= 8 && header.data_start() <= size);
    std::uint64_t covered = 0;
    for (const auto& t : header.tensors()) {
      BMT_FUZZ_CHECK(t.begin == covered);  // in data order, no gap, no overlap
      BMT_FUZZ_CHECK(t.end >= t.begin && t.end <= header.data_size());
      BMT_FUZZ_CHECK(t.element_size > 0 && (t.end - t.begin) % t.element_size == 0);
      std::uint64_t numel = 1;
      for (auto d : t.shape) numel *= static_cast<std::uint64_t>(d);
      BMT_FUZZ_CHECK(numel == t.numel());
      BMT_FUZZ_CHECK(header.find(t.name) == &t);
      covered = t.end;
    }
    BMT_FUZZ_CHECK(covered == header.data_size());
    // The header bytes alone (as a reader that fetched only them has) give the same header.
    const auto again = SafetensorsHeader::parse(file.substr(0, header.data_start()), size);
    BMT_FUZZ_CHECK(again.tensors().size() == header.tensors().size());
    BMT_FUZZ_CHECK(again.metadata() == header.metadata());
    BMT_FUZZ_CHECK(SafetensorsHeader::json_length(file) + 8 == header.data_start());
    const auto step = bmt::io::optimizer_step(header.metadata(), "optimizer.safetensors");
    BMT_FUZZ_CHECK(!step || (*step >= 0 && *step <= (std::int64_t{1} << 53)));
    BMT_FUZZ_CHECK(step.has_value() == (header.metadata().count("step") == 1));
  } catch (const bmt::Error&) {
    // Rejected with a message: what bad input must get.
  }
  return 0;
}
