// Checkpoint directories: publish-then-mark protocol, keep-last-K, partial saves never loaded,
// failures agreed on every rank; training-state JSON files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bmtrain/io/atomic_file.hpp"
#include "bmtrain/io/checkpoint_dir.hpp"
#include "bmtrain/io/directory_lock.hpp"
#include "bmtrain/io/json_file.hpp"
#include "bmtrain/io/safetensors_file.hpp"
#include "bmtrain/io/training_state.hpp"
#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/runtime/error.hpp"
#include "common/io_test_util.hpp"

namespace fs = std::filesystem;
using bmt::io::CheckpointDir;
using bmt::error_of;
using bmt::test::SharedTempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

// A save as a training program makes it: weights written in parallel, training state by rank 0.
void save_step(CheckpointDir& ckpt, std::int64_t step) {
  const std::string dir = ckpt.begin_save(step);
  {
    bmt::io::SafetensorsWriter out(dir + "/model.safetensors", {{"w", bmt::DType::f32, {8}}});
    const auto r = static_cast<std::uint64_t>(bmt::rank()), n = static_cast<std::uint64_t>(bmt::world_size());
    std::vector<float> v(8, static_cast<float>(step));
    out.write("w", r * 8 / n, (r + 1) * 8 / n - r * 8 / n, v.data());
    out.close();
  }
  bmt::io::TrainingState s;
  s.step = step;
  s.data = {{"epoch", 1}, {"position", step * 4}};
  bmt::io::save_training_state(dir + "/training_state.json", s);
  ckpt.commit_save(step);
}

void on_rank0(const std::function<void()>& f) {
  if (bmt::rank() == 0) f();
  bmt::test::barrier();
}

}  // namespace

TEST(CheckpointDir, SaveCommitFindAndKeepLast) {
  SharedTempDir tmp;
  const std::string root = tmp / "ckpt";
  CheckpointDir ckpt(root, /*keep_last=*/2);
  EXPECT_FALSE(ckpt.latest().has_value());
  EXPECT_EQ(ckpt.begin_save(10), root + "/step-10.tmp");
  EXPECT_TRUE(fs::is_directory(root + "/step-10.tmp"));
  EXPECT_FALSE(CheckpointDir::latest_complete(root).has_value()) << "a save in progress is not a checkpoint";
  bmt::test::barrier();  // before save_step begins step 10 afresh
  save_step(ckpt, 10);
  EXPECT_FALSE(fs::exists(root + "/step-10.tmp"));
  ASSERT_EQ(CheckpointDir::latest_complete(root), std::optional<std::int64_t>(10));

  const auto marker = CheckpointDir::completion(root, 10);
  EXPECT_EQ(marker.at("step"), 10);
  EXPECT_EQ(marker.at("world_size"), bmt::world_size());
  EXPECT_EQ(marker.at("time").get<std::string>().size(), 20u);  // 2026-11-30T11:39:04Z

  save_step(ckpt, 20);
  save_step(ckpt, 30);
  EXPECT_THAT(CheckpointDir::complete_steps(root), ElementsAre(20, 30));
  EXPECT_FALSE(fs::exists(root + "/step-10")) << "older than the last 2";
  EXPECT_EQ(ckpt.latest(), std::optional<std::int64_t>(30));

  const auto state = bmt::io::load_training_state(ckpt.step_path(30) + "/training_state.json");
  EXPECT_EQ(state.step, 30);
  EXPECT_EQ(state.data.at("position"), 120);
  bmt::io::SafetensorsReader in(ckpt.step_path(30) + "/model.safetensors");
  float v[8];
  in.read("w", 0, 8, v);
  for (float x : v) EXPECT_EQ(x, 30.0f);
}

TEST(CheckpointDir, KeepLastZeroKeepsEverything) {
  SharedTempDir tmp;
  CheckpointDir ckpt(tmp / "all");
  for (int s : {1, 2, 3, 4}) save_step(ckpt, s);
  EXPECT_THAT(CheckpointDir::complete_steps(tmp / "all"), ElementsAre(1, 2, 3, 4));
}

TEST(CheckpointDir, PartialSavesAreNeverLoaded) {
  SharedTempDir tmp;
  const std::string root = tmp / "ckpt";
  CheckpointDir ckpt(root, 3);
  save_step(ckpt, 5);
  on_rank0([&] {
    // Killed while writing files.
    fs::create_directories(root + "/step-9.tmp");
    bmt::test::write_file(root + "/step-9.tmp/model.safetensors", "partial");
    // Killed after the rename, before the marker.
    fs::create_directories(root + "/step-7");
    // A torn or foreign marker, a marker naming another step, names that are not steps.
    fs::create_directories(root + "/step-8");
    bmt::test::write_file(root + "/step-8/COMPLETE", "{\"step\": 8");
    fs::create_directories(root + "/step-6");
    bmt::test::write_file(root + "/step-6/COMPLETE", "{\"step\": 5}");
    fs::create_directories(root + "/step-x1");
    bmt::test::write_file(root + "/step-x1/COMPLETE", "{\"step\": 1}");
    bmt::test::write_file(root + "/step-12", "a file, not a directory");
  });
  EXPECT_THAT(CheckpointDir::complete_steps(root), ElementsAre(5));
  EXPECT_EQ(CheckpointDir::latest_complete(root), std::optional<std::int64_t>(5));
  EXPECT_EQ(ckpt.latest(), std::optional<std::int64_t>(5));
  EXPECT_THAT(error_of([&] { CheckpointDir::completion(root, 7); }),
              HasSubstr("expected a complete checkpoint (a COMPLETE marker naming step 7), found none"));

  // The next completed save clears the leftovers of interrupted ones, and nothing else.
  save_step(ckpt, 11);
  EXPECT_THAT(CheckpointDir::complete_steps(root), ElementsAre(5, 11));
  for (const char* gone : {"step-9.tmp", "step-7", "step-8", "step-6"}) EXPECT_FALSE(fs::exists(root + "/" + gone)) << gone;
  EXPECT_TRUE(fs::exists(root + "/step-x1"));
  EXPECT_TRUE(fs::exists(root + "/step-12"));
}

// A step directory named on the command line is loaded only with a marker that parses and names
// its step: each way a marker can be wrong is an error naming the marker.
TEST(CheckpointDir, MarkedStepOfAStepDirectory) {
  SharedTempDir tmp;
  const std::string root = tmp / "ckpt";
  CheckpointDir ckpt(root, 0);
  save_step(ckpt, 8);
  EXPECT_EQ(CheckpointDir::marked_step(root + "/step-8"), 8);
  EXPECT_EQ(CheckpointDir::marked_step(root + "/step-8/"), 8);
  on_rank0([&] {
    fs::create_directories(root + "/copy");
    fs::copy_file(root + "/step-8/COMPLETE", root + "/copy/COMPLETE");
  });
  EXPECT_EQ(CheckpointDir::marked_step(root + "/copy"), 8) << "a directory of another name: the marker's step";
  const auto with_marker = [&](const std::string& text) {
    on_rank0([&] { bmt::test::write_file(root + "/step-8/COMPLETE", text); });
    const std::string error = error_of([&] { CheckpointDir::marked_step(root + "/step-8"); });
    bmt::test::barrier();  // every rank has read it before rank 0 writes the next
    return error;
  };
  EXPECT_THAT(with_marker("garbage"), HasSubstr("step-8/COMPLETE': expected a JSON object {\"format\": 1, \"step\": N, ...}, found"));
  EXPECT_THAT(with_marker("[8]"), HasSubstr("found [8]"));
  EXPECT_THAT(with_marker("{\"format\": 1}"), HasSubstr("expected a whole number 'step', found none"));
  EXPECT_THAT(with_marker("{\"format\": 1, \"step\": \"8\"}"), HasSubstr("expected a whole number 'step', found \"8\""));
  EXPECT_THAT(with_marker("{\"format\": 1, \"step\": -8}"), HasSubstr("expected a whole number 'step', found -8"));
  EXPECT_THAT(with_marker("{\"format\": 2, \"step\": 8}"), HasSubstr("expected format 1, found 2"));
  EXPECT_THAT(with_marker("{\"format\": 1, \"step\": 9}"), HasSubstr("expected step 8 (the directory's), found 9"));
  on_rank0([&] { fs::remove(root + "/step-8/COMPLETE"); });
  EXPECT_THAT(error_of([&] { CheckpointDir::marked_step(root + "/step-8"); }),
              HasSubstr("expected a complete checkpoint (a COMPLETE marker), found none"));
}

TEST(CheckpointDir, SaveKilledAtAnyPointLeavesThePreviousLoadable) {
  SharedTempDir tmp;
  const std::string root = tmp / "ckpt";
  CheckpointDir ckpt(root, 1);
  save_step(ckpt, 10);
  // Killed after begin_save and some writing.
  const std::string dir = ckpt.begin_save(20);
  on_rank0([&] { bmt::test::write_file(dir + "/model.safetensors", "half a file"); });
  EXPECT_EQ(CheckpointDir::latest_complete(root), std::optional<std::int64_t>(10));
  // Killed between the rename and the marker.
  on_rank0([&] { fs::rename(dir, root + "/step-20"); });
  EXPECT_EQ(CheckpointDir::latest_complete(root), std::optional<std::int64_t>(10));
  // Killed while writing the marker: only COMPLETE.tmp exists.
  on_rank0([&] { bmt::test::write_file(root + "/step-20/COMPLETE.tmp", "{\"step\": 20, \"wor"); });
  EXPECT_EQ(CheckpointDir::latest_complete(root), std::optional<std::int64_t>(10));
  // Step 10 is still intact and loadable.
  bmt::io::SafetensorsReader in(ckpt.step_path(10) + "/model.safetensors");
  float v = 0;
  in.read("w", 7, 1, &v);
  EXPECT_EQ(v, 10.0f);
  // Saving step 20 again replaces the incomplete directory; with keep_last 1 step 10 then goes.
  save_step(ckpt, 20);
  EXPECT_THAT(CheckpointDir::complete_steps(root), ElementsAre(20));
  EXPECT_FALSE(fs::exists(root + "/step-20/COMPLETE.tmp"));
}

TEST(CheckpointDir, SavingTheSameStepAgainReplacesIt) {
  SharedTempDir tmp;
  CheckpointDir ckpt(tmp / "ckpt");
  save_step(ckpt, 3);
  save_step(ckpt, 3);
  EXPECT_THAT(CheckpointDir::complete_steps(tmp / "ckpt"), ElementsAre(3));
}

TEST(CheckpointDir, UnwritableRootFailsOnEveryRank) {
  SharedTempDir tmp;
  on_rank0([&] { bmt::test::write_file(tmp / "file", "not a directory"); });
  CheckpointDir ckpt(tmp / "file/ckpt");
  const std::string message = error_of([&] { ckpt.begin_save(1); });
  EXPECT_THAT(message, HasSubstr("checkpoint root '" + (tmp / "file/ckpt") + "': cannot create it: Not a directory"));
  EXPECT_THAT(message, HasSubstr("(on rank 0 of " + std::to_string(bmt::world_size()) + ")"));
  EXPECT_THAT(error_of([&] { CheckpointDir(tmp / "ckpt").commit_save(4); }),
              HasSubstr("expected the directory '" + (tmp / "ckpt") + "/step-4.tmp' of begin_save(4), found none"));
}

TEST(CheckpointDir, FullDiskOnRankZeroFailsTheStateOnEveryRank) {
  SharedTempDir tmp;
  bmt::io::TrainingState s;
  s.step = 1;
  rlimit saved{};
  auto* previous = signal(SIGXFSZ, SIG_IGN);
  if (bmt::rank() == 0) {
    getrlimit(RLIMIT_FSIZE, &saved);
    rlimit limit = saved;
    limit.rlim_cur = 10;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  const std::string message = error_of([&] { bmt::io::save_training_state(tmp / "state.json", s); });
  if (bmt::rank() == 0) setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, previous);
  EXPECT_THAT(message, HasSubstr("state.json.tmp' failed after 10 bytes: File too large (on rank 0 of"));
  EXPECT_FALSE(fs::exists(tmp / "state.json"));
  EXPECT_FALSE(fs::exists(tmp / "state.json.tmp"));
}

TEST(TrainingState, RoundTripAndValidation) {
  SharedTempDir tmp;
  bmt::io::TrainingState s;
  s.step = 1234;
  s.lr_scheduler = {{"kind", "cosine"}, {"last_lr", 3e-4}};
  s.loss_scaler = {{"scale", 65536.0}, {"good_steps", 17}};
  s.rng = {{"seed", 42}, {"counter", 99}};
  s.data = {{"epoch", 2}, {"position", 4096}};
  bmt::io::save_training_state(tmp / "state.json", s);
  const auto back = bmt::io::load_training_state(tmp / "state.json");
  EXPECT_EQ(back.step, 1234);
  EXPECT_EQ(back.lr_scheduler, s.lr_scheduler);
  EXPECT_EQ(back.loss_scaler, s.loss_scaler);
  EXPECT_EQ(back.rng, s.rng);
  EXPECT_EQ(back.data, s.data);

  EXPECT_THAT(error_of([&] { bmt::io::load_training_state(tmp / "missing.json"); }),
              HasSubstr("missing.json': No such file or directory (on rank 0"));
  on_rank0([&] {
    bmt::test::write_file(tmp / "torn.json", "{\"format\": 1, \"step\": 1");
    bmt::test::write_file(tmp / "nostep.json", "{\"format\": 1}");
    bmt::test::write_file(tmp / "future.json", "{\"format\": 2, \"step\": 1}");
  });
  EXPECT_THAT(error_of([&] { bmt::io::load_training_state(tmp / "torn.json"); }), HasSubstr("expected valid JSON"));
  EXPECT_THAT(error_of([&] { bmt::io::load_training_state(tmp / "nostep.json"); }),
              HasSubstr("expected a non-negative integer 'step', found none"));
  EXPECT_THAT(error_of([&] { bmt::io::load_training_state(tmp / "future.json"); }),
              HasSubstr("expected format 1, found 2"));
}

// A write that fails part way (a file size limit, as a full disk) leaves the previous file whole
// and no temporary; a device is written in place, not replaced.
TEST(AtomicFile, FailedWriteLeavesThePreviousFile) {
  SharedTempDir tmp;
  if (bmt::rank() != 0) return;
  const std::string path = tmp / "curve.svg";
  const auto content = [&] {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    return os.str();
  };
  bmt::io::write_file_atomic(path, "first");
  EXPECT_EQ(content(), "first");
  rlimit saved{};
  auto* previous = signal(SIGXFSZ, SIG_IGN);
  getrlimit(RLIMIT_FSIZE, &saved);
  rlimit limit = saved;
  limit.rlim_cur = 100;
  setrlimit(RLIMIT_FSIZE, &limit);
  const std::string message = error_of([&] { bmt::io::write_file_atomic(path, std::string(1000, 'x')); });
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, previous);
  EXPECT_THAT(message, HasSubstr("writing 1000 bytes to '" + path + ".tmp' failed after 100 bytes: File too large"));
  EXPECT_EQ(content(), "first");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  bmt::io::write_file_atomic(path, "second");
  EXPECT_EQ(content(), "second");
  EXPECT_THAT(error_of([&] { bmt::io::write_file_atomic(tmp / "no/such/dir.svg", "x"); }),
              HasSubstr("cannot create '" + (tmp / "no/such/dir.svg.tmp") + "': No such file or directory"));
  bmt::io::write_file_atomic("/dev/null", "discarded");
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_FALSE(fs::exists("/dev/null.tmp"));
  EXPECT_THAT(error_of([&] { bmt::io::write_file_atomic("/dev/full", "x"); }),
              HasSubstr("writing 1 bytes to '/dev/full' failed after 0 bytes: No space left on device"));
}

TEST(JsonFile, AtomicWriteReplacesAndLeavesNoTemporary) {
  SharedTempDir tmp;
  if (bmt::rank() == 0) {
    bmt::io::write_json_atomic(tmp / "a.json", {{"x", 1}});
    bmt::io::write_json_atomic(tmp / "a.json", {{"x", 2}});
    EXPECT_EQ(bmt::io::read_json(tmp / "a.json").at("x"), 2);
    EXPECT_FALSE(fs::exists(tmp / "a.json.tmp"));
    EXPECT_THAT(error_of([&] { bmt::io::write_json_atomic(tmp / "no/such/dir.json", {}); }),
                HasSubstr("cannot create '" + (tmp / "no/such/dir.json.tmp") + "': No such file or directory"));
  }
}

// A second holder of a directory's lock, even in this process (open-file-description locks), is
// refused with the first one's host and pid; once the first lets go, the next takes it.
TEST(DirectoryLock, OneHolderAtATime) {
  SharedTempDir tmp;
  const std::string dir = tmp / ("lock-" + std::to_string(bmt::rank()));
  fs::create_directories(dir);
  {
    bmt::io::DirectoryLock first(dir, "--save");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    EXPECT_THAT(error_of([&] { bmt::io::DirectoryLock second(dir, "--save"); }),
                HasSubstr("--save '" + dir + "': expected no other job using it, found one holding its lock '" + dir +
                          "/.lock': host " + host + ", pid " + std::to_string(::getpid()) + " (since "));
  }
  bmt::io::DirectoryLock again(dir, "--save");  // the file stays; its lock went with its holder
  EXPECT_THAT(error_of([&] { bmt::io::DirectoryLock l(tmp / "no-such-dir", "--save"); }),
              HasSubstr("cannot open its lock file"));
}
