// The standalone runner of the fuzz targets, for any compiler (gcc in CI):
//   replay_<target> [--mutations N] [--seed S] [--artifacts DIR] INPUTS...
// feeds every file of the given files and directories to LLVMFuzzerTestOneInput once, in sorted
// order; with --mutations N it then runs N more executions on inputs derived from those files by
// random byte edits (flips, overwrites with boundary values, inserts, deletes, duplicated chunks,
// splices of two inputs). The mutations are a deterministic function of the seed, so a failure
// repeats. When an input crashes the target (a signal, an abort, an uncaught exception), it is
// written to DIR/crash-<target>-<n> before the process dies: copy it into the corpus and it
// becomes a regression test. With clang, the same targets link against libFuzzer instead
// (BMT_ENABLE_FUZZING) and explore with coverage guidance.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

// The input being executed and where a crash saves it; read by the signal handler, so plain data.
const std::uint8_t* g_input = nullptr;
std::size_t g_input_size = 0;
char g_crash_path[4096] = "";

void save_input_and_die(int sig) {
  if (g_crash_path[0]) {
    const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      std::size_t done = 0;
      while (done < g_input_size) {
        const ssize_t n = ::write(fd, g_input + done, g_input_size - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
      ::close(fd);
      const char msg[] = "replay: the crashing input is saved in ";
      (void)!::write(2, msg, sizeof msg - 1);
      (void)!::write(2, g_crash_path, std::strlen(g_crash_path));
      (void)!::write(2, "\n", 1);
    }
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void run(const std::vector<std::uint8_t>& data) {
  // The input lives in a buffer of exactly its size, as under libFuzzer, so that a read past its
  // end is a read past an allocation (caught under AddressSanitizer).
  static const std::uint8_t nothing = 0;
  g_input = data.empty() ? &nothing : data.data();
  g_input_size = data.size();
  LLVMFuzzerTestOneInput(g_input, g_input_size);
}

// One random edit of `x` (another corpus input `other` for splices).
void mutate(std::vector<std::uint8_t>& x, const std::vector<std::uint8_t>& other, std::mt19937_64& rng) {
  static const std::uint8_t kBoundary[] = {0x00, 0x01, 0x7f, 0x80, 0xff, '"', '{', '}', '[', ']',
                                           ',',  ':',  '-',  '0',  '9',  'e', '.', '\n', '=', ' '};
  auto pick = [&](std::size_t n) { return n ? static_cast<std::size_t>(rng() % n) : 0; };
  switch (rng() % 6) {
    case 0:  // flip a bit
      if (!x.empty()) x[pick(x.size())] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
      break;
    case 1:  // overwrite a byte with a boundary value
      if (!x.empty()) x[pick(x.size())] = kBoundary[pick(sizeof kBoundary)];
      break;
    case 2:  // insert a few bytes
      x.insert(x.begin() + static_cast<std::ptrdiff_t>(pick(x.size() + 1)), 1 + rng() % 4,
               kBoundary[pick(sizeof kBoundary)]);
      break;
    case 3:  // delete a range
      if (!x.empty()) {
        const std::size_t at = pick(x.size()), n = 1 + pick(std::min<std::size_t>(16, x.size() - at));
        x.erase(x.begin() + static_cast<std::ptrdiff_t>(at), x.begin() + static_cast<std::ptrdiff_t>(at + n));
      }
      break;
    case 4:  // duplicate a chunk in place
      if (!x.empty() && x.size() < 65536) {
        const std::size_t at = pick(x.size()), n = 1 + pick(std::min<std::size_t>(64, x.size() - at));
        const std::vector<std::uint8_t> chunk(x.begin() + static_cast<std::ptrdiff_t>(at),
                                              x.begin() + static_cast<std::ptrdiff_t>(at + n));
        x.insert(x.begin() + static_cast<std::ptrdiff_t>(pick(x.size() + 1)), chunk.begin(), chunk.end());
      }
      break;
    default:  // splice: a prefix of x, then a suffix of another input
    {
      const std::size_t cut = pick(x.size() + 1), from = pick(other.size() + 1);
      x.resize(cut);
      x.insert(x.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
    }
  }
}

int usage(const char* why) {
  std::fprintf(stderr,
               "replay: %s\nusage: replay_<target> [--mutations N] [--seed S] [--artifacts DIR] FILES_OR_DIRS...\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  long long mutations = 0;
  unsigned long long seed = 1;
  fs::path artifacts = ".";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mutations" || arg == "--seed" || arg == "--artifacts") {
      if (i + 1 >= argc) return usage(("expected a value after " + arg).c_str());
      const std::string value = argv[++i];
      char* end = nullptr;
      if (arg == "--artifacts") {
        artifacts = value;
        continue;
      }
      const unsigned long long n = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || *end) return usage(("expected a number after " + arg + ", found '" + value + "'").c_str());
      if (arg == "--mutations")
        mutations = static_cast<long long>(n);
      else
        seed = n;
      continue;
    }
    const fs::path p = arg;
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
  if (inputs.empty()) return usage("expected at least one input (a corpus directory or files), found none");
  std::sort(inputs.begin(), inputs.end());

  const std::string target = fs::path(argv[0]).filename().string();
  const std::string crash_path = (artifacts / ("crash-" + target)).string();
  std::snprintf(g_crash_path, sizeof g_crash_path, "%s", crash_path.c_str());
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, save_input_and_die);

  std::vector<std::vector<std::uint8_t>> corpus;
  for (const auto& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    corpus.emplace_back(bytes.begin(), bytes.end());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", p.string().c_str(), corpus.back().size());
    run(corpus.back());
  }
  std::printf("replay: ran %zu inputs without a crash\n", inputs.size());
  if (mutations <= 0) return 0;

  std::mt19937_64 rng(seed);
  for (long long n = 0; n < mutations; ++n) {
    std::vector<std::uint8_t> x = corpus[rng() % corpus.size()];
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) mutate(x, corpus[rng() % corpus.size()], rng);
    run(x);
  }
  std::printf("replay: ran %lld mutated inputs (seed %llu) without a crash\n", mutations, seed);
  return 0;
}
