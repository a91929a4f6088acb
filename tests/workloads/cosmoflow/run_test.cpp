// CosmoFlow's data through mlperf-run: files that are not what they seem end the run with one line
// naming the file, never a hang nor an out-of-memory with no name.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "../../integration/cli.hpp"

namespace fs = std::filesystem;
using namespace mlph::test;

namespace {

// A generated npy dataset of 4 training and 2 validation 32^3 samples.
fs::path npy_dataset(const std::string& name) {
  const fs::path dir = fresh_dir(name);
  const CliResult generated = run_cli("--workload cosmoflow --generate-data " + (dir / "data").string() +
                                      " --set data.edge=32 --set data.synthetic.format=npy"
                                      " --set data.synthetic.train=4 --set data.synthetic.valid=2");
  EXPECT_EQ(generated.exit_code, 0) << generated.output;
  return dir;
}

CliResult train(const fs::path& dir) {
  return run_command("timeout 120 " MLPH_BINARY_DIR "/bin/mlperf-run --workload cosmoflow --data " +
                     (dir / "data").string() + " --division open --set data.edge=32 --set data.format=npy --set train.epochs=1"
                     " --set train.batch_size=2 --set optimizer.warmup_epochs=0 --output " +
                     (dir / "out").string());
}

fs::path first_file(const fs::path& dir, const std::string& suffix) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().string().ends_with(suffix)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files.at(0);
}

}  // namespace

// Issue 16 #3: a FIFO as a label file hung the run, and SIGTERM then blamed "a step or collective".
TEST(CosmoFlowRun, AFifoLabelFileIsNamedWithoutHanging) {
  const fs::path dir = npy_dataset("cosmoflow-fifo");
  const fs::path label = first_file(dir / "data" / "train", "_label.npy");
  fs::remove(label);
  ASSERT_EQ(::mkfifo(label.c_str(), 0600), 0);
  const CliResult r = train(dir);
  EXPECT_NE(r.exit_code, 124) << "still hangs after 120 s";
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(label.string() + ": is a FIFO, not a regular file"), std::string::npos) << r.output;
}

// Issue 16 #9: a directory named X_label.npy made the storage read ask for about 8 EiB.
TEST(CosmoFlowRun, ADirectoryAsALabelFileIsNamed) {
  const fs::path dir = npy_dataset("cosmoflow-dir-label");
  const fs::path label = first_file(dir / "data" / "train", "_label.npy");
  fs::remove(label);
  fs::create_directory(label);
  const CliResult r = train(dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(label.string() + ": is a directory, not a regular file"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("out of memory"), std::string::npos) << r.output;
}

// Issue 16 #19: a -1 count was accepted and training died with "loss is -nan" naming no file.
TEST(CosmoFlowRun, ANegativeCountIsRefusedNamingTheFile) {
  const fs::path dir = npy_dataset("cosmoflow-negative");
  const fs::path data = first_file(dir / "data" / "train", "_data.npy");
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-2, std::ios::end);  // the last value: voxel (31, 31, 31), channel 3
    const char minus_one[2] = {'\xff', '\xff'};
    f.write(minus_one, 2);
  }
  const CliResult r = train(dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(data.string() + ": voxel (31, 31, 31) channel 3 holds -1: particle counts cannot be negative"),
            std::string::npos)
      << r.output;
}
