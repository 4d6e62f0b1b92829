// The standalone runner of the fuzz targets: feeds every file of the given files and directories
// to LLVMFuzzerTestOneInput once, in sorted order. It lets any compiler (gcc in CI) run the targets
// over their seed corpus and past crashes as a regular test; with clang, the same targets link
// against libFuzzer instead (BMT_ENABLE_FUZZING) and explore from that corpus.
//   replay_<target> test/fuzz/corpus/<target> [more files or directories]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path p = argv[i];
    if (fs::is_directory(p)) {
      for (const auto& entry : fs::recursive_directory_iterator(p))
        if (entry.is_regular_file()) inputs.push_back(entry.path());
    } else if (fs::is_regular_file(p)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "replay: expected a file or directory, found nothing at '%s'\n", argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: expected at least one input (a corpus directory or files), found none\n");
    return 2;
  }
  std::sort(inputs.begin(), inputs.end());
  for (const auto& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // The input lives in a buffer of exactly its size, as under libFuzzer, so that a read past its
    // end is a read past an allocation (caught under AddressSanitizer).
    std::vector<std::uint8_t> data(bytes.begin(), bytes.end());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", p.string().c_str(), data.size());
    static const std::uint8_t nothing = 0;
    LLVMFuzzerTestOneInput(data.empty() ? &nothing : data.data(), data.size());
  }
  std::printf("replay: ran %zu inputs without a crash\n", inputs.size());
  return 0;
}
