// CosmoFlow's side of spatial parallelism: which blocks run split and the one line for a grid that
// does not divide the volume; the split graph's weights are the whole graph's; and a dataset's part of
// each sample (npy read by byte ranges, or with whole-file storage and TFRecord decoded whole and
// cut) is exactly that box of the whole sample.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "data/npy.hpp"
#include "data/synthetic.hpp"
#include "dataset_reader.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/sdk/comms/spatial.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "model.hpp"

using namespace mlph;
using namespace mlph::cosmoflow;
using namespace mlph::cosmoflow::test;
namespace fs = std::filesystem;

namespace {

ModelSettings split(int edge, std::vector<int64_t> grid) {
  ModelSettings m;
  m.edge = edge;
  m.grid = std::move(grid);
  return m;
}

std::string refusal(const ModelSettings& m) {
  try {
    spatial_blocks(m);
  } catch (const sdk::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CosmoFlowSpatial, BlocksSplitWhileTheyHalveEvenly) {
  EXPECT_EQ(spatial_blocks(split(32, {1, 1, 1})), 0);
  EXPECT_EQ(spatial_blocks(split(32, {2, 1, 1})), 4) << "conv5's input is 2^3: blocks of 1 would not pool";
  EXPECT_EQ(spatial_blocks(split(64, {4, 1, 1})), 4);
  EXPECT_EQ(spatial_blocks(split(64, {2, 2, 2})), 5);
  EXPECT_EQ(spatial_blocks(split(128, {2, 1, 1})), 5);
  EXPECT_EQ(spatial_blocks(split(512, {8, 1, 1})), 5);
  EXPECT_EQ(refusal(split(32, {3, 1, 1})),
            "'parallel.spatial' = 3x1x1: data.edge 32 does not split along D into 3 blocks of an even size of at "
            "least 2 (every block is max-pooled by 2 and holds a halo of 1)");
  EXPECT_EQ(refusal(split(32, {1, 1, 32})),
            "'parallel.spatial' = 1x1x32: data.edge 32 does not split along W into 32 blocks of an even size of at "
            "least 2 (every block is max-pooled by 2 and holds a halo of 1)");
}

TEST(CosmoFlowSpatial, TheSplitGraphHasTheWholeGraphsWeights) {
  sdk::GraphBuilder whole, parts;
  build_model(whole, split(32, {1, 1, 1}), 0.9, 2, 7);
  build_model(parts, split(32, {1, 2, 2}), 0.9, 2, 7);
  const MLPH_Graph &a = *whole.graph(), &b = *parts.graph();
  ASSERT_EQ(a.n_params, b.n_params);
  for (size_t p = 0; p < a.n_params; ++p) {
    const MLPH_Value &va = a.values[a.params[p].value], &vb = b.values[b.params[p].value];
    EXPECT_STREQ(va.name, vb.name);
    ASSERT_EQ(sdk::numel(va), sdk::numel(vb)) << va.name;
    EXPECT_TRUE(std::equal(a.params[p].init, a.params[p].init + sdk::numel(va), b.params[p].init)) << va.name;
  }
  EXPECT_EQ(a.n_nodes + 4 + 1, b.n_nodes) << "a halo exchange before each of 4 split convs, one gather";
  EXPECT_EQ(b.values[b.inputs[0]].shape[1], 32);
  EXPECT_EQ(b.values[b.inputs[0]].shape[2], 16);
}

namespace {

// The box of two whole samples [2, 8, 8, 8, 4].
std::vector<int16_t> cut(const std::vector<int16_t>& whole, sdk::spatial::Dims at, sdk::spatial::Dims size) {
  const sdk::spatial::Dims extent{2, size[0], size[1], size[2], 4};
  std::vector<int16_t> out(static_cast<size_t>(sdk::spatial::volume(extent)));
  sdk::spatial::copy_box(whole.data(), {{2, 8, 8, 8, 4}, {0, at[0], at[1], at[2], 0}}, out.data(),
                         {extent, {0, 0, 0, 0, 0}}, extent);
  return out;
}

}  // namespace

TEST(CosmoFlowSpatial, APartIsThatBoxOfTheWholeSample) {
  const fs::path root = fs::temp_directory_path() / ("mlph-spatial-parts-" + std::to_string(getpid()));
  const std::vector<std::pair<sdk::spatial::Dims, sdk::spatial::Dims>> parts = {
      {{4, 0, 0}, {4, 8, 8}},  // a D split: one byte range per sample
      {{0, 2, 0}, {8, 2, 8}},  // an H split: a range per plane
      {{2, 4, 6}, {4, 4, 2}},  // everything split: W cut from whole rows
  };
  for (const Format format : {Format::npy, Format::tfrecord_gzip})
    for (const bool ranges : {true, false}) {
      const fs::path dir = root / (std::string(format_name(format)) + (ranges ? "-ranges" : "-whole"));
      Reader reader(dir, format, ranges);
      const std::vector<int16_t> whole = read(reader.dataset());
      for (const auto& [at, size] : parts) {
        const uint64_t before = reader.bytes_read();
        EXPECT_EQ(read(reader.dataset(), at, size), cut(whole, at, size))
            << format_name(format) << (ranges ? " with" : " without") << " read_range, part at " << at[0] << ","
            << at[1] << "," << at[2];
        if (format == Format::npy && ranges && at == sdk::spatial::Dims{4, 0, 0}) {
          EXPECT_LT(reader.bytes_read() - before, 2 * (8 * 8 * 8 * 4 * 2 / 2 + 1024)) << "half of each sample, headers, labels";
        }
      }
      try {
        read(reader.dataset(), {6, 0, 0}, {4, 8, 8});
        ADD_FAILURE() << "a part outside the volume was read";
      } catch (const sdk::Error& e) {
        EXPECT_STREQ(e.what(), "CosmoFlow read: the part [6:10, 0:8, 0:8] lies outside the 8^3x4 volume");
      }
    }
  fs::remove_all(root);
}

namespace {

// The sorted *_data.npy training files of a Reader's directory: sample i is file i.
std::vector<fs::path> npy_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir / "train"))
    if (entry.path().string().ends_with("_data.npy")) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// What reading a part of samples 1 and 0 (D split, at D = 4) throws; "" when it reads.
std::string part_refusal(CosmoDataset& d) {
  try {
    read(d, {4, 0, 0}, {4, 8, 8});
  } catch (const sdk::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// A part read by byte ranges checks what a whole read checks (issue 16): counts >= 0 (the voxel named
// in the whole volume's coordinates), the file's end (neither short nor long), and regular files only.
TEST(CosmoFlowSpatial, APartReadRefusesBadDataAsAWholeReadDoes) {
  const fs::path root = fs::temp_directory_path() / ("mlph-spatial-bad-" + std::to_string(getpid()));
  {
    Reader reader(root / "negative", Format::npy, true);
    const fs::path file = npy_files(root / "negative").at(0);
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    std::vector<std::byte> head(64);
    f.read(reinterpret_cast<char*>(head.data()), 64);
    const uint64_t voxel = ((5 * 8 + 1) * 8 + 2) * 4 + 3;  // (5, 1, 2) channel 3: in the part
    f.seekp(static_cast<std::streamoff>(npy_data_offset(head, file.string()) + voxel * 2));
    f.write("\xff\xff", 2);  // -1
    f.close();
    const std::string error = part_refusal(reader.dataset());
    EXPECT_NE(error.find(file.string() + ": voxel (5, 1, 2) channel 3 holds -1: particle counts cannot be negative"),
              std::string::npos)
        << error;
  }
  {
    Reader reader(root / "short", Format::npy, true);
    const fs::path file = npy_files(root / "short").at(1);
    fs::resize_file(file, fs::file_size(file) - 100);
    const std::string error = part_refusal(reader.dataset());
    EXPECT_NE(error.find(file.string() + ": bytes "), std::string::npos) << error;
    EXPECT_NE(error.find("lie past the end of the file (" + std::to_string(fs::file_size(file)) + " bytes)"),
              std::string::npos)
        << error;
  }
  {
    Reader reader(root / "long", Format::npy, true);
    const fs::path file = npy_files(root / "long").at(1);
    const auto size = fs::file_size(file);
    std::ofstream(file, std::ios::binary | std::ios::app) << "trailing bytes";
    const std::string error = part_refusal(reader.dataset());
    EXPECT_NE(error.find(file.string() + ": holds bytes past the " + std::to_string(size) + " that its header's shape"),
              std::string::npos)
        << error;
  }
  {
    Reader reader(root / "fifo", Format::npy, true);
    const fs::path file = npy_files(root / "fifo").at(1);
    fs::remove(file);
    ASSERT_EQ(mkfifo(file.c_str(), 0600), 0);
    const std::string error = part_refusal(reader.dataset());  // must not block on the FIFO
    EXPECT_NE(error.find(file.string() + ": is a FIFO, not a regular file"), std::string::npos) << error;
  }
  fs::remove_all(root);
}
