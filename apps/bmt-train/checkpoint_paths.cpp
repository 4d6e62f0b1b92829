#include "checkpoint_paths.hpp"

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/io/checkpoint_dir.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace bmt_train {

namespace {

bool has_marker(const std::string& dir) {
  struct stat st {};
  return ::stat((dir + "/" + bmt::io::CheckpointDir::kMarker).c_str(), &st) == 0;
}

}  // namespace

std::string resolve_resume(const std::string& path) {
  // A step directory is loaded only with a valid marker: one that does not parse, or names another
  // step, is an error here, not a checkpoint loaded anyway.
  if (has_marker(path)) {
    bmt::io::CheckpointDir::marked_step(path);
    return path;
  }
  const auto last = bmt::io::CheckpointDir::latest_complete(path);
  BMT_REQUIRE(last, "--resume: expected a complete checkpoint (a directory with a COMPLETE marker, or a root holding "
                    "step-N directories), found none at '"
                        << path << "'");
  return path + "/step-" + std::to_string(*last);
}

void check_writable_root(const std::string& root) {
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  BMT_REQUIRE(!ec, "--save '" << root << "': expected a directory checkpoints can be written to, cannot create it: "
                              << ec.message());
  const std::string probe = root + "/.bmt-train-write-test";
  {
    std::ofstream f(probe, std::ios::trunc);
    f << "probe\n";
    f.flush();
    BMT_REQUIRE(f, "--save '" << root << "': expected a directory checkpoints can be written to, cannot write '"
                              << probe << "'");
  }
  std::filesystem::remove(probe, ec);
}

void check_own_root(const std::string& root, const std::string& resumed_from) {
  const auto steps = bmt::io::CheckpointDir::complete_steps(root);
  if (steps.empty()) return;
  std::error_code ec;
  if (!resumed_from.empty() && std::filesystem::equivalent(std::filesystem::path(resumed_from).parent_path(), root, ec))
    return;
  std::string found;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (i == 3 && steps.size() > 4) {  // a long list: the first three and the newest
      found += ", ..., step-" + std::to_string(steps.back());
      break;
    }
    found += (i ? ", step-" : "step-") + std::to_string(steps[i]);
  }
  BMT_REQUIRE(false, "--save '" << root << "': expected a folder without another run's checkpoints (this run would "
                                << "prune them), found " << found << (resumed_from.empty() ? std::string() : " (this run resumes " + resumed_from + ")") << ": continue that run with --resume " << root
                                << ", or choose another --save folder");
}

}  // namespace bmt_train
