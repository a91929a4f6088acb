// Checkpoints and exports read as a hostile user would write them (issue 28): a manifest whose shapes
// overflow, whose offsets wrap, that is an alias bomb or too large, names that are no checkpoint of the
// directory, files that are FIFOs or devices, strings with control characters; and the files the
// programs write never written through a link. Each is refused in one line naming the file, in
// bounded time and memory: the readers run in a child process held to a deadline and an address-space
// limit, so a regression that hangs or grows fails the test instead of stalling the suite.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>

#include "mlph/core/atomic_file.hpp"
#include "mlph/core/checkpoint_file.hpp"
#include "mlph/core/export.hpp"
#include "mlph/core/npz.hpp"
#include "mlph/sdk/storage/storage.hpp"
#include "mlph/sdk/workload/workload.hpp"

using namespace mlph;
using namespace mlph::core;
namespace fs = std::filesystem;

namespace {

fs::path fresh(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mlph-test-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

CheckpointIdentity identity() {
  CheckpointIdentity id;
  id.benchmark = "cosmoflow", id.workload = "cosmoflow", id.backend = "reference";
  id.graph_fingerprint = "0123456789abcdef", id.config_hash = "fedcba9876543210";
  id.hyperparameters = {{"model.dropout", "0.5"}};
  return id;
}

// A good checkpoint of one tensor "w" of `count` floats in `dir`/epoch-000001 (and `latest`).
fs::path write_checkpoint(const fs::path& dir, int64_t count) {
  const std::vector<float> values(static_cast<size_t>(count), 0.5f);
  CheckpointWriter w(dir, 1);
  w.add("w", "", MLPH_DTYPE_F32, {count}, values.data());
  return w.commit(identity(), RunnerState{1, 2, 2, {0.25}}, 2);
}

// Replaces `from` (which must be there) with `to` in the checkpoint's manifest.
void edit_manifest(const fs::path& checkpoint, const std::string& from, const std::string& to) {
  std::string text = slurp(checkpoint / "manifest.json");
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from << " in " << text;
  text.replace(at, from.size(), to);
  std::ofstream(checkpoint / "manifest.json", std::ios::trunc) << text;
}

struct ChildResult {
  bool returned = false;  // ended by itself within the deadline (not killed, not crashed)
  std::string message;    // what it threw ("" when it threw nothing)
  long max_rss_mib = 0;
};

// Runs `body` in a child held to `seconds` and 4 GiB of address space; what it throws comes back.
ChildResult in_child(const std::function<void()>& body, unsigned seconds = 20) {
  int out[2];
  if (pipe(out) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    alarm(seconds);
#if !defined(__SANITIZE_ADDRESS__)
    const rlimit memory{rlim_t{4} << 30, rlim_t{4} << 30};
    setrlimit(RLIMIT_AS, &memory);
#endif
    std::string message;
    try {
      body();
    } catch (const std::exception& e) {
      message = e.what();
      if (message.empty()) message = "(an exception with no message)";
    }
    (void)!write(out[1], message.data(), message.size());
    _exit(0);
  }
  close(out[1]);
  ChildResult result;
  std::array<char, 4096> buffer{};
  for (ssize_t n; (n = read(out[0], buffer.data(), buffer.size())) > 0;) result.message.append(buffer.data(), size_t(n));
  close(out[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  result.returned = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  result.max_rss_mib = usage.ru_maxrss / 1024;
  return result;
}

// Opening the checkpoint at `path` in a child: it must refuse, in time, with `expected` in its message.
void expect_refused(const fs::path& path, const std::string& expected, long max_rss_mib = 200) {
  const ChildResult r = in_child([&] { CheckpointReader{path}; });
  ASSERT_TRUE(r.returned) << "the reader hung or crashed on " << path;
  EXPECT_NE(r.message.find(expected), std::string::npos) << r.message;
  EXPECT_EQ(r.message.find('\n'), std::string::npos) << "one line: " << r.message;
  EXPECT_LT(r.max_rss_mib, max_rss_mib) << r.message;
}

}  // namespace

// Defect 1: twenty dims whose product is 1 mod 2^64 "hold" the tensor's one float; mlph-export copied
// them into MLPH_Value.shape[8] (a stack overflow).
TEST(HostileCheckpoint, ATensorOfMoreDimsThanATensorHasIsRefused) {
  const fs::path dir = fresh("ckpt-dims");
  const fs::path checkpoint = write_checkpoint(dir, 1);
  std::string dims = "6280111091792576901, 6139343578876104525";  // inverses mod 2^64, both below 2^63
  for (int i = 0; i < 18; ++i) dims += ", 1";
  edit_manifest(checkpoint, "\"shape\": [1]", "\"shape\": [" + dims + "]");
  expect_refused(dir, (checkpoint / "manifest.json").string() + ": tensor 'w' has 20 dims, more than the 8 of a tensor");
}

// Defect 2: [2^62 + 1, 4] floats is 16 bytes mod 2^64; the export's transpose then read past them.
TEST(HostileCheckpoint, AnElementCountThatWrapsIsRefused) {
  const fs::path dir = fresh("ckpt-wrap");
  const fs::path checkpoint = write_checkpoint(dir, 4);
  edit_manifest(checkpoint, "\"shape\": [4]", "\"shape\": [4611686018427387905, 4]");
  expect_refused(dir, "tensor 'w' of shape [4611686018427387905,4] is not the 16 bytes the manifest says");
  edit_manifest(checkpoint, "\"shape\": [4611686018427387905, 4]", "\"shape\": [-4, -1]");
  expect_refused(dir, "tensor 'w' has a dim that is no size");
}

// Defect 3: an offset that wraps past the end of a 64-byte file passed the size check, and each tensor's
// declared size was allocated (and zeroed) before a byte was read: 2 GiB for this one.
TEST(HostileCheckpoint, AnOffsetPastTheFileIsRefusedBeforeAnythingIsAllocated) {
  const fs::path dir = fresh("ckpt-offset");
  const fs::path checkpoint = write_checkpoint(dir, 16);  // 64 bytes
  edit_manifest(checkpoint, "\"shape\": [16], \"offset\": 0, \"bytes\": 64",
                "\"shape\": [536870912], \"offset\": 18446744071562067968, \"bytes\": 2147483648");
  expect_refused(dir, "tensor 'w' (2147483648 bytes at offset 18446744071562067968) lies past the end of the file");
}

// Defect 3, the sparse file: tensors.bin as large as its manifest says, but larger than the machine's
// memory, was a bare std::bad_alloc naming no file.
TEST(HostileCheckpoint, ATensorsFileLargerThanMemoryIsRefusedNamingIt) {
  const fs::path dir = fresh("ckpt-sparse");
  const fs::path checkpoint = write_checkpoint(dir, 16);
  const uint64_t huge = sdk::physical_memory_bytes() / 64 * 64 + 64;  // a float count's bytes, past memory
  edit_manifest(checkpoint, "\"shape\": [16], \"offset\": 0, \"bytes\": 64",
                fmt::format("\"shape\": [{}], \"offset\": 0, \"bytes\": {}", huge / 4, huge));
  edit_manifest(checkpoint, "\"tensors_bytes\": 64", fmt::format("\"tensors_bytes\": {}", huge));
  fs::resize_file(checkpoint / "tensors.bin", huge);  // sparse: nothing is written
  expect_refused(dir, (checkpoint / "tensors.bin").string() + ": " + std::to_string(huge) +
                          " bytes, more than the " + std::to_string(sdk::physical_memory_bytes()) +
                          " bytes of this machine's memory");
  fs::remove_all(dir);
}

// Defect 4: a manifest is YAML-read within bounds, as configs and logs are: no anchors or aliases (an
// alias bomb of 25 KB took 12 s and 220 MB), at most 4 MiB, at most 250 000 nodes.
TEST(HostileCheckpoint, AManifestIsReadWithinBounds) {
  const fs::path dir = fresh("ckpt-bomb");
  const fs::path checkpoint = write_checkpoint(dir, 1);
  std::string bomb = "{\"format\": \"mlph-checkpoint\", \"l0\": &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]";
  for (int level = 1; level < 12; ++level) {
    bomb += fmt::format(", \"l{0}\": &l{0} [", level);
    for (int i = 0; i < 10; ++i) bomb += fmt::format("{}*l{}", i ? ", " : "", level - 1);
    bomb += "]";
  }
  std::ofstream(checkpoint / "manifest.json", std::ios::trunc) << bomb << "}\n";
  expect_refused(dir, "YAML anchors and aliases are not accepted");

  std::string many = "[0";
  for (int i = 0; i < 300'000; ++i) many += ",0";
  std::ofstream(checkpoint / "manifest.json", std::ios::trunc) << many << "]\n";
  expect_refused(dir, "more than 250000 YAML nodes");
  fs::resize_file(checkpoint / "manifest.json", 5u << 20);
  expect_refused(dir, (checkpoint / "manifest.json").string() + ": 5242880 bytes, more than the 4194304 bytes allowed");
}

// Defect 5: a FIFO as `latest`, manifest.json or tensors.bin blocked the reader forever; `latest`
// linked to /dev/zero was read without bound.
TEST(HostileCheckpoint, FilesThatAreNoRegularFilesAreRefusedAtOnce) {
  const fs::path dir = fresh("ckpt-fifo");
  const fs::path checkpoint = write_checkpoint(dir, 1);
  fs::remove(dir / "latest");
  ASSERT_EQ(mkfifo((dir / "latest").c_str(), 0644), 0);
  expect_refused(dir, (dir / "latest").string() + ": is a FIFO, not a regular file");
  fs::remove(dir / "latest");
  fs::create_symlink("/dev/zero", dir / "latest");
  expect_refused(dir, (dir / "latest").string() + ": is a character device, not a regular file");

  for (const char* file : {"manifest.json", "tensors.bin"}) {
    const fs::path saved = dir / "saved";
    fs::rename(checkpoint / file, saved);
    ASSERT_EQ(mkfifo((checkpoint / file).c_str(), 0644), 0);
    expect_refused(checkpoint, (checkpoint / file).string() + ": is a FIFO, not a regular file");
    fs::remove(checkpoint / file);
    fs::rename(saved, checkpoint / file);
  }
  EXPECT_TRUE(in_child([&] { CheckpointReader{checkpoint}; }).message.empty()) << "the control: it reads";
}

// Defect 10: `latest` names a checkpoint of its own directory, nothing else: not a path out of it
// (relative or absolute), not the directory itself (empty), which resumed from the current directory.
TEST(HostileCheckpoint, LatestNamesOnlyACheckpointOfItsDirectory) {
  const fs::path dir = fresh("ckpt-latest");
  const fs::path elsewhere = fresh("ckpt-latest-elsewhere");
  write_checkpoint(dir, 1);
  const fs::path outside = write_checkpoint(elsewhere, 1);  // a good checkpoint, but another directory's
  for (const std::string& name : {"../" + elsewhere.filename().string() + "/epoch-000001", outside.string(),
                                  std::string(""), std::string("."), std::string("epoch-000001/..")}) {
    std::ofstream(dir / "latest", std::ios::trunc) << name << "\n";
    expect_refused(dir, (dir / "latest").string() + ": names \"" + name + "\", not a checkpoint of this directory");
  }
  std::ofstream(dir / "latest", std::ios::trunc) << "epoch-000001\n";
  EXPECT_EQ(CheckpointReader(dir).dir(), dir / "epoch-000001") << "the control";
}

// Defect 14: yaml-cpp's conversions named no file, and strings of the manifest reached the terminal as
// they were (an escape sequence, a newline): every error names the manifest, and quotes escaped.
TEST(HostileCheckpoint, ManifestErrorsNameTheFileAndQuoteEscaped) {
  const fs::path dir = fresh("ckpt-quote");
  const fs::path checkpoint = write_checkpoint(dir, 1);
  const fs::path manifest = checkpoint / "manifest.json";
  const std::string good = slurp(manifest);
  const auto refused_with = [&](const std::string& from, const std::string& to, const std::string& expected) {
    std::ofstream(manifest, std::ios::trunc) << good;
    edit_manifest(checkpoint, from, to);
    expect_refused(dir, manifest.string() + ": " + expected);
  };
  refused_with("\"format\": \"mlph-checkpoint\"", "\"format\": \"\\u001b[2J\\nevil\"",
               "not an mlperf-hpc checkpoint (format '\\u001b[2J\\nevil', expected 'mlph-checkpoint')");
  refused_with("\"model.dropout\": \"0.5\"", "\"model.dropout\": [0.5]",
               "the manifest's \"hyperparameters\" holds more than key: value");
  refused_with("\"shape\": [1]", "\"shape\": [\"one\"]", "tensor 'w' has a dim that is no size");
  refused_with("\"shape\": [1]", "\"shape\": 1", "the manifest's \"shape\" is not a list");
  refused_with("\"name\": \"w\"", "\"name\": \"w\\u001b[2J\"", "a tensor's \"name\" \"w\\u001b[2J\" holds a control character");
  refused_with("\"workload\": \"cosmoflow\"", "\"workload\": \"../../evil\"",
               "the manifest's \"workload\" \"../../evil\" is no plug-in name");
  refused_with("\"seed\": 0", "\"seed\": -1", "the manifest's \"seed\" = -1 is not an integer of its range");
  refused_with("\"format\": \"mlph-checkpoint\"", "\"format\": [", "not a readable checkpoint manifest (line ");
}

// Defects 1 and 2 where they struck, in the export itself: a parameter's shape is checked before it is
// copied into an MLPH_Value (8 dims at most) and before the transpose walks its values.
namespace {
struct DenseLayout {  // the reference's Linear weight: [in, out] transposed, as CosmoFlow's dense layers
  static std::vector<sdk::ExportEntry> reference_layout(const MLPH_Value& param) {
    return {sdk::torch_linear("dense.weight", param)};
  }
};
const auto kDenseLayout = sdk::reference_layout_entry<DenseLayout>();
}  // namespace

TEST(HostileExport, AParameterOfMoreDimsThanATensorIsRefused) {
  const fs::path dir = fresh("export-dims");
  std::vector<int64_t> shape(20, 1);
  const std::vector<ParameterValues> params = {{"dense.kernel", shape, {1.0f}}};
  try {
    export_weights(kDenseLayout, params, 0, AtomicFile(dir / "w.npz"));
    FAIL() << "exported";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "exporting 'dense.kernel': 20 dims, more than the 8 of a tensor");
  }
  EXPECT_FALSE(fs::exists(dir / "w.npz"));
}

TEST(HostileExport, AShapeThatDoesNotHoldItsValuesIsRefused) {
  const fs::path dir = fresh("export-wrap");
  const std::vector<ParameterValues> params = {{"dense.kernel", {4611686018427387905, 4}, {1, 2, 3, 4}}};
  try {
    export_weights(kDenseLayout, params, 0, AtomicFile(dir / "w.npz"));
    FAIL() << "exported";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "exporting 'dense.kernel': its shape [4611686018427387905,4] does not hold its 4 values");
  }
  EXPECT_FALSE(fs::exists(dir / "w.npz"));
  // The control: a [2, 2] kernel exports, transposed.
  EXPECT_EQ(export_weights(kDenseLayout, {{"dense.kernel", {2, 2}, {1, 2, 3, 4}}}, 0, AtomicFile(dir / "w.npz")), 1u);
  EXPECT_TRUE(fs::exists(dir / "w.npz"));
}

// Defect 11: the export's temporary had a fixed name (OUT.tmp), opened through whatever was there: a
// link (its target overwritten) or a FIFO (a hang). A file is now made under a fresh name with
// O_EXCL, and renamed over the target, which is replaced, never written through.
TEST(AtomicFile, NeverWritesThroughWhatStandsAtItsNames) {
  const fs::path dir = fresh("atomic");
  std::ofstream(dir / "victim") << "precious";
  fs::create_symlink(dir / "victim", dir / "w.npz.tmp");
  ASSERT_EQ(mkfifo((dir / "fifo.npz.tmp").c_str(), 0644), 0);
  fs::create_symlink(dir / "victim", dir / "w.npz");
  const ChildResult r = in_child([&] {
    for (const char* name : {"w.npz", "fifo.npz"}) {
      NpzWriter npz(dir / name);
      const float values[2] = {1, 2};
      npz.add("a", MLPH_DTYPE_F32, {2}, values);
      npz.finish();
    }
  });
  ASSERT_TRUE(r.returned) << "hung on a FIFO";
  EXPECT_EQ(r.message, "");
  EXPECT_EQ(slurp(dir / "victim"), "precious");
  EXPECT_FALSE(fs::is_symlink(dir / "w.npz"));
  EXPECT_TRUE(fs::is_regular_file(dir / "w.npz") && fs::is_regular_file(dir / "fifo.npz"));
  EXPECT_TRUE(fs::is_symlink(dir / "w.npz.tmp") && fs::is_fifo(dir / "fifo.npz.tmp")) << "left as they were";
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 5u) << "no temporary left behind";
  try {
    AtomicFile(dir / "victim").write("x");  // uncommitted: the target stays as it was
    AtomicFile{dir};
    FAIL() << "a directory was taken as a file";
  } catch (const OutputError& e) {
    EXPECT_EQ(std::string(e.what()), dir.string() + ": is a directory");
  }
  EXPECT_EQ(slurp(dir / "victim"), "precious");
}
