// The CosmoFlow dataset's whole-sample reads: a sample decoded straight into the batch (no cache, one
// sample per file: the pipeline's fast path) is the sample the cached path decodes, in every format,
// and a file that breaks the fast path's assumptions is refused naming it; data.cache keeps a sample
// once for all the datasets that a run's readers open.
#include <gtest/gtest.h>
#include <unistd.h>

#include "data/tfrecord.hpp"
#include "dataset_reader.hpp"

using namespace mlph;
using namespace mlph::cosmoflow;
using namespace mlph::cosmoflow::test;

TEST(CosmoFlowDataset, ASampleDecodedInPlaceIsTheCachedOne) {
  const fs::path root = fs::temp_directory_path() / ("mlph-dataset-in-place-" + std::to_string(getpid()));
  for (const Format format : {Format::npy, Format::tfrecord, Format::tfrecord_gzip}) {
    const fs::path dir = root / std::string(format_name(format));
    Reader in_place(dir, format, true, false), cached(dir, format, true, true);
    std::vector<float> y_in_place, y_cached;
    const std::vector<int16_t> x = read(in_place.dataset(), {}, {8, 8, 8}, &y_in_place);
    EXPECT_EQ(x, read(cached.dataset(), {}, {8, 8, 8}, &y_cached)) << format_name(format);
    EXPECT_EQ(y_in_place, y_cached) << format_name(format);
    EXPECT_NE(std::count(x.begin(), x.end(), int16_t{0}), static_cast<std::ptrdiff_t>(x.size())) << "real counts";
    EXPECT_NE(y_in_place[0], y_in_place[4]) << "two samples' targets";
    // Read again: the reader's file buffer, kept from the last sample, holds nothing of it.
    EXPECT_EQ(read(in_place.dataset()), x) << format_name(format);
  }
  fs::remove_all(root);
}

TEST(CosmoFlowDataset, AFileOfTwoRecordsIsRefusedWhereOneIsConfigured) {
  const fs::path root = fs::temp_directory_path() / ("mlph-dataset-two-records-" + std::to_string(getpid()));
  const fs::path dir = root / "gzip";
  Reader reader(dir, Format::tfrecord_gzip, true);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir / "train")) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  Sample s;
  s.x.assign(8 * 8 * 8 * 4, 1);
  write_tfrecord_file(files[1].string(), std::vector<Sample>{s, s}, 8, {true, -1});
  try {
    read(reader.dataset());
    ADD_FAILURE() << "a file of two records was read as one sample";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(std::string(e.what()), files[1].string() + ": holds more than one record, but data.records_per_file is 1");
  }
  fs::remove_all(root);
}

TEST(CosmoFlowDataset, TheReadersDatasetsShareOneCache) {
  const fs::path root = fs::temp_directory_path() / ("mlph-dataset-shared-cache-" + std::to_string(getpid()));
  const fs::path dir = root / "npy";
  auto kept = std::make_shared<SampleCache>();
  std::vector<int16_t> first;
  {
    Reader one(dir, Format::npy, true, true, kept);
    first = read(one.dataset());
  }
  Reader other(dir, Format::npy, true, true, kept);  // rewrites the same files...
  for (const auto& entry : fs::directory_iterator(dir / "train")) fs::remove(entry.path());  // ...gone now
  EXPECT_EQ(read(other.dataset()), first) << "another reader's dataset finds the samples kept";
  Reader own(dir, Format::npy, true, true);
  for (const auto& entry : fs::directory_iterator(dir / "train")) fs::remove(entry.path());
  EXPECT_THROW(read(own.dataset()), sdk::Error) << "a cache of its own has nothing";
  fs::remove_all(root);
}
