// DeepCAM data: the reference file order (numpy's legacy shuffle) and epoch order (torch's randperm,
// through the plug-in's sample_order), HDF5 samples and stats decoded
// from memory with one clear error per kind of bad file, the synthetic generator, and a split read
// end to end through the posix storage plug-in.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <sstream>
#include <string>

#include "data/file_order.hpp"
#include "data/hdf5_io.hpp"
#include "data/synthetic.hpp"
#include "dataset.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/sdk/graph/tensor.hpp"

namespace fs = std::filesystem;
using namespace mlph;
using namespace mlph::deepcam;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mlph-deepcam-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// In one block copy: byte by byte, a 64 MiB file took over 10 s under ASan.
std::vector<std::byte> slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  const std::string chars = text.str();
  const auto* first = reinterpret_cast<const std::byte*>(chars.data());  // never NULL, unlike an empty vector's
  return {first, first + chars.size()};
}

// A sample file of h x w x 16 with chosen datasets; `labels` empty writes none.
fs::path write_sample(const fs::path& file, int h, int w, const std::vector<int32_t>& labels, bool with_data = true) {
  Hdf5Writer out(file.string());
  const auto hh = static_cast<size_t>(h), ww = static_cast<size_t>(w);
  if (with_data) {
    std::vector<float> data(hh * ww * 16);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i % 97) * 0.5f;
    out.write("climate/data", {hh, ww, 16}, std::span<const float>(data));
  }
  if (!labels.empty()) out.write("climate/labels_0", {hh, ww}, std::span<const int32_t>(labels));
  out.commit();
  return file;
}

std::string sample_error(const fs::path& file, int h, int w) {
  try {
    decode_sample(slurp(file), file.string(), h, w, 16);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

std::string stats_error(const fs::path& file) {
  try {
    decode_stats(slurp(file), file.string(), 16);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(DeepCamFileOrder, MatchesNumpyRandomState12345Shuffle) {
  // /usr/bin/python3: x = list(range(n)); np.random.RandomState(12345).shuffle(x)
  EXPECT_EQ(numpy_shuffled_indices(10), (std::vector<uint64_t>{0, 7, 3, 9, 6, 4, 1, 8, 5, 2}));
  const std::vector<uint64_t> thousand = numpy_shuffled_indices(1000);
  EXPECT_EQ(std::vector<uint64_t>(thousand.begin(), thousand.begin() + 6),
            (std::vector<uint64_t>{144, 833, 270, 468, 962, 186}));
  EXPECT_EQ(thousand[997], 285u);
  EXPECT_EQ(thousand[999], 482u);
  const std::vector<uint64_t> full = numpy_shuffled_indices(121266);  // the real training set
  EXPECT_EQ(std::vector<uint64_t>(full.begin(), full.begin() + 6),
            (std::vector<uint64_t>{109041, 63108, 42880, 72741, 51723, 78402}));
  EXPECT_EQ(full.back(), 86498u);
  EXPECT_EQ(numpy_shuffled_indices(1), (std::vector<uint64_t>{0}));
}

TEST(DeepCamSampleOrder, MatchesTorchRandperm) {
  // /usr/bin/python3 (torch 1.13): torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
  EXPECT_EQ(torch_randperm(10, 0), (std::vector<uint64_t>{4, 1, 7, 5, 3, 9, 0, 8, 6, 2}));
  EXPECT_EQ(torch_randperm(10, 1), (std::vector<uint64_t>{5, 6, 1, 2, 0, 8, 9, 3, 7, 4}));
  EXPECT_EQ(torch_randperm(7, 2), (std::vector<uint64_t>{2, 4, 3, 0, 6, 1, 5}));
  const std::vector<uint64_t> full = torch_randperm(121266, 5);  // the real training set's size
  EXPECT_EQ(std::vector<uint64_t>(full.begin(), full.begin() + 4), (std::vector<uint64_t>{60119, 45005, 106273, 58116}));
  EXPECT_EQ(std::vector<uint64_t>(full.end() - 4, full.end()), (std::vector<uint64_t>{97868, 45270, 44621, 75024}));
}

// Through the C ABI, as the runner asks: epoch e is DistributedSampler(seed=0).set_epoch(e), whatever
// the run's seed. With 3 ranks the runner deals order[r], order[r+3], ...; torch gives rank 0 [5, 2, 9],
// rank 1 [6, 0, 3], rank 2 [1, 8, 7] of 10 samples in epoch 1 (drop_last).
TEST(DeepCamSampleOrder, ThePluginGivesTheReferenceSamplersOrder) {
  const core::LoadedPlugin plugin = core::PluginLoader({MLPH_PLUGIN_DIR}).load(MLPH_KIND_WORKLOAD, "deepcam");
  const auto* api = plugin.api<MLPH_WorkloadApi>();
  ASSERT_GE(api->struct_size, MLPH_STRUCT_SIZE(MLPH_WorkloadApi, sample_order));
  ASSERT_NE(api->sample_order, nullptr);
  std::vector<MLPH_KeyValue> config;
  size_t n = 0;
  const MLPH_ParamSpec* specs = api->params(&n);
  for (size_t i = 0; i < n; ++i) config.push_back({specs[i].key, specs[i].default_value});
  MLPH_Workload* raw = nullptr;
  core::check(api->create(core::host_api(), config.data(), config.size(), &raw), "create");
  const std::unique_ptr<MLPH_Workload, void (*)(MLPH_Workload*)> workload(raw, api->destroy);
  std::vector<uint64_t> order(10);
  core::check(api->sample_order(workload.get(), 1, order.size(), order.data()), "sample_order");
  EXPECT_EQ(order, (std::vector<uint64_t>{5, 6, 1, 2, 0, 8, 9, 3, 7, 4}));
  const std::vector<uint64_t> rank1 = {order[1], order[4], order[7]};
  EXPECT_EQ(rank1, (std::vector<uint64_t>{6, 0, 3}));
}

TEST(DeepCamHdf5, SampleRoundTripFromMemory) {
  const fs::path dir = fresh_dir("roundtrip");
  std::vector<int32_t> labels(4 * 6, 0);
  labels[5] = 1, labels[23] = 2;
  const fs::path file = write_sample(dir / "data-a.h5", 4, 6, labels);
  EXPECT_FALSE(fs::exists(dir / "data-a.h5.partial"));
  const Sample s = decode_sample(slurp(file), file.string(), 4, 6, 16);
  ASSERT_EQ(s.data.size(), 4u * 6 * 16);
  EXPECT_EQ(s.data[100], 3.0f * 0.5f);  // 100 % 97
  EXPECT_EQ(s.labels, labels);
}

TEST(DeepCamHdf5, FloatLabelsAreAcceptedWhenIntegral) {
  const fs::path dir = fresh_dir("float-labels");
  Hdf5Writer out((dir / "data-f.h5").string());
  std::vector<float> data(2 * 2 * 16, 1.0f);
  std::vector<double> labels{0, 1, 2, 0};
  out.write("climate/data", {2, 2, 16}, std::span<const float>(data));
  out.write("climate/labels_0", {2, 2}, std::span<const double>(labels));
  out.commit();
  EXPECT_EQ(decode_sample(slurp(dir / "data-f.h5"), "f", 2, 2, 16).labels, (std::vector<int32_t>{0, 1, 2, 0}));
}

TEST(DeepCamHdf5, BadSamplesFailWithOneLineNamingTheFile) {
  const fs::path dir = fresh_dir("bad");
  const std::vector<int32_t> labels(4 * 6, 0);
  const fs::path no_data = write_sample(dir / "data-nodata.h5", 4, 6, labels, false);
  EXPECT_EQ(sample_error(no_data, 4, 6), no_data.string() + ": no dataset 'climate/data'");

  const fs::path no_labels = write_sample(dir / "data-nolabels.h5", 4, 6, {});
  EXPECT_EQ(sample_error(no_labels, 4, 6), no_labels.string() + ": no dataset 'climate/labels_0'");

  const fs::path good = write_sample(dir / "data-good.h5", 4, 6, labels);
  EXPECT_EQ(sample_error(good, 8, 6), good.string() + ": 'climate/data' has shape (4, 6, 16), expected (8, 6, 16)");

  {
    Hdf5Writer out((dir / "data-f64.h5").string());
    std::vector<double> data(4 * 6 * 16, 0.0);
    out.write("climate/data", {4, 6, 16}, std::span<const double>(data));
    out.write("climate/labels_0", {4, 6}, std::span<const int32_t>(labels));
    out.commit();
  }
  EXPECT_EQ(sample_error(dir / "data-f64.h5", 4, 6), (dir / "data-f64.h5").string() + ": climate/data is float64, expected float32");

  std::vector<int32_t> three = labels;
  three[6 + 2] = 3;  // row 1, column 2
  const fs::path bad_label = write_sample(dir / "data-label3.h5", 4, 6, three);
  EXPECT_EQ(sample_error(bad_label, 4, 6),
            bad_label.string() + ": climate/labels_0 holds 3.000000 at pixel (1, 2): labels must be 0, 1 or 2");

  const std::vector<std::byte> whole = slurp(good);
  const fs::path truncated = dir / "data-truncated.h5";
  std::ofstream(truncated, std::ios::binary).write(reinterpret_cast<const char*>(whole.data()), whole.size() / 2);
  const std::string message = sample_error(truncated, 4, 6);
  EXPECT_EQ(message.rfind(truncated.string() + ": ", 0), 0u) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);

  std::ofstream(dir / "data-empty.h5").close();
  EXPECT_EQ(sample_error(dir / "data-empty.h5", 4, 6), (dir / "data-empty.h5").string() + ": empty file");
}

TEST(DeepCamHdf5, StatsScaleInTheirDtypeAndMaxEqualMinIsRefused) {
  const fs::path dir = fresh_dir("stats");
  std::vector<float> lo(16), hi(16);
  for (int c = 0; c < 16; ++c) lo[c] = -1.0f - static_cast<float>(c), hi[c] = 2.0f + 0.1f * static_cast<float>(c);
  {
    Hdf5Writer out((dir / "stats.h5").string());
    out.write("climate/minval", {16}, std::span<const float>(lo));
    out.write("climate/maxval", {16}, std::span<const float>(hi));
    out.commit();
  }
  const Stats stats = decode_stats(slurp(dir / "stats.h5"), "stats.h5", 16);
  EXPECT_EQ(stats.shift[3], -4.0f);
  EXPECT_EQ(stats.scale[3], 1.0f / (hi[3] - lo[3]));  // float32 arithmetic, like the float32 stats of the reference
  hi[9] = lo[9];
  {
    Hdf5Writer out((dir / "flat.h5").string());
    out.write("climate/minval", {16}, std::span<const float>(lo));
    out.write("climate/maxval", {16}, std::span<const float>(hi));
    out.commit();
  }
  EXPECT_EQ(stats_error(dir / "flat.h5"), (dir / "flat.h5").string() +
                                              ": channel 9 has min -10.000000 and max -10.000000: the normalization "
                                              "1/(max-min) needs max > min");
  {
    Hdf5Writer out((dir / "nomax.h5").string());
    out.write("climate/minval", {16}, std::span<const float>(lo));
    out.commit();
  }
  EXPECT_EQ(stats_error(dir / "nomax.h5"), (dir / "nomax.h5").string() + ": no dataset 'climate/maxval'");
}

TEST(DeepCamSynthetic, DeterministicMostlyBackgroundWithLearnableFeatures) {
  const Sample a = synthesize_sample(3, 17, 96, 144), b = synthesize_sample(3, 17, 96, 144);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(synthesize_sample(3, 18, 96, 144).data, a.data);
  // Over 40 samples: ~94% background, both event classes present, and the physics a network can
  // see: low surface pressure (PS, channel 6) in cyclones, high moisture (TMQ, channel 0) in rivers.
  uint64_t counts[3] = {0, 0, 0};
  double ps[3] = {0, 0, 0}, tmq[3] = {0, 0, 0};
  for (uint64_t i = 0; i < 40; ++i) {
    const Sample s = synthesize_sample(1, i, 96, 144);
    for (size_t p = 0; p < s.labels.size(); ++p) {
      const int c = s.labels[p];
      ++counts[c];
      ps[c] += s.data[p * 16 + 6], tmq[c] += s.data[p * 16 + 0];
    }
  }
  const double total = static_cast<double>(counts[0] + counts[1] + counts[2]);
  EXPECT_GT(counts[0] / total, 0.90);
  EXPECT_LT(counts[0] / total, 0.97);
  EXPECT_GT(counts[1] / total, 0.003);
  EXPECT_GT(counts[2] / total, 0.02);
  for (int c = 0; c < 3; ++c) ps[c] /= static_cast<double>(counts[c]), tmq[c] /= static_cast<double>(counts[c]);
  EXPECT_LT(ps[1], ps[0] - 2000);   // spread 1500 Pa: a vortex lowers PS by ~3 spreads at its centre
  EXPECT_GT(tmq[2], tmq[0] + 15);   // spread 12 kg/m2: a river adds up to 3 spreads
}

TEST(DeepCamSynthetic, WrittenDatasetReadsBackThroughThePosixStoragePlugin) {
  const fs::path dir = fresh_dir("dataset");
  write_dataset(dir.string(), 5, 2, 32, 48, 9);
  EXPECT_TRUE(fs::exists(dir / "stats.h5"));
  EXPECT_TRUE(fs::exists(dir / "train" / synthetic_file_name(9, 4)));
  EXPECT_TRUE(fs::exists(dir / "validation" / synthetic_file_name(9, 6)));
  const Stats stats = decode_stats(slurp(dir / "stats.h5"), "stats.h5", 16);
  EXPECT_GT(stats.shift[6], 90000.0f);  // PS minimum, in Pa
  EXPECT_LT(stats.shift[6], 98000.0f);

  const core::LoadedPlugin posix = core::PluginLoader::load_file(
      fs::path(MLPH_PLUGIN_DIR) / core::plugin_file_name(MLPH_KIND_STORAGE, "posix"), MLPH_KIND_STORAGE, "posix");
  const auto* api = posix.api<MLPH_StorageApi>();
  MLPH_Storage* storage = nullptr;
  ASSERT_EQ(api->create(core::host_api(), nullptr, 0, &storage), nullptr);
  const MLPH_StorageHandle handle{sizeof(MLPH_StorageHandle), nullptr, api, storage};
  DataSettings settings;
  settings.dir = dir.string(), settings.height = 32, settings.width = 48;
  {
    DeepCamDataset train(core::host_api(), settings, MLPH_SPLIT_TRAIN, handle);
    ASSERT_EQ(train.size(), 5u);
    // The sorted names shuffled by RandomState(12345): numpy gives [0, 4, 3, 1, 2] for 5 files.
    EXPECT_EQ(fs::path(train.files()[0]).filename(), synthetic_file_name(9, 0));
    EXPECT_EQ(fs::path(train.files()[1]).filename(), synthetic_file_name(9, 4));
    std::vector<float> x(2 * 32 * 48 * 16);
    std::vector<int32_t> labels(2 * 32 * 48);
    const int64_t x_shape[] = {2, 32, 48, 16}, y_shape[] = {2, 32, 48};
    MLPH_Tensor inputs[2] = {sdk::host_tensor(MLPH_DTYPE_F32, x_shape, 4, x.data()),
                             sdk::host_tensor(MLPH_DTYPE_I32, y_shape, 3, labels.data())};
    const uint64_t indices[2] = {1, 0};
    train.read(indices, 2, inputs, 2);
    const Sample four = synthesize_sample(9, 4, 32, 48);
    EXPECT_EQ(std::vector<float>(x.begin(), x.begin() + 32 * 48 * 16), four.data);
    EXPECT_EQ(std::vector<int32_t>(labels.begin(), labels.begin() + 32 * 48), four.labels);

    // A file that turns bad after listing fails the read with the file's name.
    std::ofstream(train.files()[3], std::ios::trunc).write("garbage", 7);
    const uint64_t bad[2] = {0, 3};
    try {
      train.read(bad, 2, inputs, 2);
      ADD_FAILURE() << "no error";
    } catch (const sdk::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(train.files()[3] + ": not a readable HDF5 file", 0), 0u) << e.what();
    }
  }
  DeepCamDataset validation(core::host_api(), settings, MLPH_SPLIT_VALIDATION, handle);
  EXPECT_EQ(validation.size(), 2u);
  EXPECT_EQ(fs::path(validation.files()[0]).filename(), synthetic_file_name(9, 5));  // sorted, not shuffled
  api->destroy(storage);

  // The generator refuses a folder it did not write.
  std::ofstream(dir / "train" / "notes.txt") << "mine";
  try {
    write_dataset(dir.string(), 1, 1, 16, 16, 9);
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("holds 'notes.txt'"), std::string::npos) << e.what();
  }
}

// ---- Issue 16: HDF5 files that reach outside themselves, ask for absurd memory, or hold NaN ----

namespace {

// One HDF5 identifier, closed with its function.
struct H5Id {
  hid_t id;
  herr_t (*close)(hid_t);
  ~H5Id() {
    if (id >= 0) close(id);
  }
};

const std::vector<int32_t> kNoLabels(4 * 6, 0);

// A 4 x 6 sample file whose climate/data is created with `dcpl` (and `maxdims`, when given) by
// `make_data`, which writes its values; climate/labels_0 is written normally.
fs::path write_crafted(const fs::path& file, hid_t dcpl, const std::function<void(hid_t set)>& write_data,
                       const std::vector<hsize_t>& maxdims = {}) {
  const H5Id f{H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
  const H5Id group{H5Gcreate2(f.id, "climate", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
  const hsize_t dims[3] = {4, 6, 16};
  const H5Id space{H5Screate_simple(3, dims, maxdims.empty() ? nullptr : maxdims.data()), H5Sclose};
  const H5Id set{H5Dcreate2(f.id, "climate/data", H5T_IEEE_F32LE, space.id, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose};
  EXPECT_GE(set.id, 0);
  if (write_data) write_data(set.id);
  const hsize_t label_dims[2] = {4, 6};
  const H5Id label_space{H5Screate_simple(2, label_dims, nullptr), H5Sclose};
  const H5Id labels{H5Dcreate2(f.id, "climate/labels_0", H5T_STD_I32LE, label_space.id, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT),
                    H5Dclose};
  H5Dwrite(labels.id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, kNoLabels.data());
  return file;
}

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 97) * 0.5f;
  return v;
}

void write_ramp(hid_t set) {
  const std::vector<float> values = ramp(4 * 6 * 16);
  H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
}

// sample_error, bounded in time: a decode that hangs (on a FIFO) fails the test instead.
std::string bounded_sample_error(const fs::path& file, const fs::path& fifo = {}) {
  auto attempt = std::async(std::launch::async, [&] { return sample_error(file, 4, 6); });
  if (attempt.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
    ADD_FAILURE() << file << ": decoding still hangs after 10 s";
    if (!fifo.empty()) ::close(::open(fifo.c_str(), O_WRONLY));  // let the blocked reader go
  }
  return attempt.get();
}

}  // namespace

TEST(DeepCamHdf5, ExternalLinksAreRefusedAndNeverFollowed) {
  const fs::path dir = fresh_dir("external-link");
  const fs::path other = write_sample(dir / "other.h5", 4, 6, kNoLabels);
  const fs::path fifo = dir / "fifo.h5";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const fs::path& target : {other, fifo}) {
    const fs::path file = dir / "data-link.h5";
    {
      const H5Id f{H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
      const H5Id group{H5Gcreate2(f.id, "climate", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
      ASSERT_GE(H5Lcreate_external(target.c_str(), "/climate/data", f.id, "climate/data", H5P_DEFAULT, H5P_DEFAULT), 0);
    }
    EXPECT_EQ(bounded_sample_error(file, fifo),
              file.string() + ": 'climate/data' is an external link: only data inside the file is read");
  }
  // The group itself may be the link.
  const fs::path group_link = dir / "data-group-link.h5";
  {
    const H5Id f{H5Fcreate(group_link.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
    ASSERT_GE(H5Lcreate_external(other.c_str(), "/climate", f.id, "climate", H5P_DEFAULT, H5P_DEFAULT), 0);
  }
  EXPECT_EQ(bounded_sample_error(group_link),
            group_link.string() + ": 'climate' is an external link: only data inside the file is read");
}

TEST(DeepCamHdf5, ExternalStorageIsRefusedAndNeverOpened) {
  const fs::path dir = fresh_dir("external-storage");
  const fs::path raw = dir / "raw.bin";
  const H5Id dcpl{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  ASSERT_GE(H5Pset_external(dcpl.id, raw.c_str(), 0, 4 * 6 * 16 * 4), 0);
  const fs::path file = write_crafted(dir / "data-external.h5", dcpl.id, write_ramp);
  const std::string refused = file.string() + ": 'climate/data' is stored in 1 external file: only data inside the file is read";
  EXPECT_EQ(bounded_sample_error(file), refused);
  fs::remove(raw);  // the raw data now a FIFO: reading it would block forever
  ASSERT_EQ(::mkfifo(raw.c_str(), 0600), 0);
  EXPECT_EQ(bounded_sample_error(file, raw), refused);
}

TEST(DeepCamHdf5, VirtualDatasetsAreRefused) {
  const fs::path dir = fresh_dir("virtual");
  const fs::path source = write_sample(dir / "source.h5", 4, 6, kNoLabels);
  const H5Id dcpl{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  const hsize_t dims[3] = {4, 6, 16};
  const H5Id space{H5Screate_simple(3, dims, nullptr), H5Sclose};
  ASSERT_GE(H5Pset_virtual(dcpl.id, space.id, source.c_str(), "/climate/data", space.id), 0);
  const fs::path file = write_crafted(dir / "data-virtual.h5", dcpl.id, nullptr);
  EXPECT_EQ(bounded_sample_error(file),
            file.string() + ": 'climate/data' is a virtual dataset: only data inside the file is read");
}

// Issue 16 #7: one 2 GiB chunk made a 16^3 sample cost 2.5 GB. Chunks are checked against the
// sample before anything is read.
TEST(DeepCamHdf5, ChunksLargerThanTheSampleAreRefused) {
  const fs::path dir = fresh_dir("chunks");
  const H5Id dcpl{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  const hsize_t chunk[3] = {1024, 1024, 16};  // 64 MiB for a 1.5 KiB sample
  ASSERT_GE(H5Pset_chunk(dcpl.id, 3, chunk), 0);
  const fs::path file = write_crafted(dir / "data-chunk.h5", dcpl.id, write_ramp, {H5S_UNLIMITED, H5S_UNLIMITED, 16});
  EXPECT_EQ(bounded_sample_error(file),
            file.string() + ": 'climate/data' is stored in chunks of (1024, 1024, 16), larger than its shape (4, 6, 16)");
}

// Shuffled and checksummed chunks read; compressed ones are refused before any chunk is inflated:
// HDF5 inflates a deflate chunk whole before it truncates it to the chunk's size, so a chunk of
// 768 bytes whose stream holds 64 MiB would cost 64 MiB (a few KiB can ask for gigabytes).
TEST(DeepCamHdf5, ShuffledChunksReadAndCompressedOnesAreRefusedUninflated) {
  const fs::path dir = fresh_dir("filters");
  const hsize_t chunk[3] = {2, 6, 16};
  const H5Id plain{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  ASSERT_GE(H5Pset_chunk(plain.id, 3, chunk), 0);
  ASSERT_GE(H5Pset_shuffle(plain.id), 0);
  ASSERT_GE(H5Pset_fletcher32(plain.id), 0);
  const fs::path good = write_crafted(dir / "data-shuffle.h5", plain.id, write_ramp);
  EXPECT_EQ(decode_sample(slurp(good), good.string(), 4, 6, 16).data, ramp(4 * 6 * 16));

  const H5Id deflate{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  ASSERT_GE(H5Pset_chunk(deflate.id, 3, chunk), 0);
  ASSERT_GE(H5Pset_deflate(deflate.id, 9), 0);
  const std::vector<Bytef> zeros(64 << 20);
  std::vector<Bytef> compressed(compressBound(zeros.size()));
  uLongf compressed_size = compressed.size();
  ASSERT_EQ(compress2(compressed.data(), &compressed_size, zeros.data(), zeros.size(), 9), Z_OK);
  const fs::path bomb = write_crafted(dir / "data-bomb.h5", deflate.id, [&](hid_t set) {
    for (hsize_t row : {0, 2}) {
      const hsize_t offset[3] = {row, 0, 0};
      ASSERT_GE(H5Dwrite_chunk(set, H5P_DEFAULT, 0, offset, compressed_size, compressed.data()), 0);
    }
  });
  EXPECT_EQ(bounded_sample_error(bomb),
            bomb.string() + ": 'climate/data' is stored with filter 1 \"deflate\": compressed data is not read, a "
                            "chunk could inflate to any size (h5repack -f NONE writes an uncompressed copy)");
}

TEST(DeepCamHdf5, UnknownFiltersAreRefusedBeforeAnyPluginIsLookedFor) {
  const fs::path dir = fresh_dir("unknown-filter");
  const H5Id dcpl{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  const hsize_t chunk[3] = {4, 6, 16};
  ASSERT_GE(H5Pset_chunk(dcpl.id, 3, chunk), 0);
  ASSERT_GE(H5Pset_filter(dcpl.id, 32004, H5Z_FLAG_OPTIONAL, 0, nullptr), 0);  // LZ4: no plug-in here
  const fs::path file = write_crafted(dir / "data-lz4.h5", dcpl.id, write_ramp);
  const std::string message = bounded_sample_error(file);
  EXPECT_EQ(message.rfind(file.string() + ": 'climate/data' is stored with filter 32004 ", 0), 0u) << message;
  EXPECT_NE(message.find(": compressed data is not read"), std::string::npos) << message;
}

// Issue 16 #19: NaN or infinity in the data is refused naming the file, the pixel and the channel.
// A file's bytes read by ranges, as a storage plug-in's read_range reads them.
RangeReader ranges_of(const std::vector<std::byte>& file) {
  return [&file](uint64_t offset, std::span<std::byte> into) {
    if (offset > file.size() || into.size() > file.size() - offset) return false;
    std::copy_n(file.begin() + static_cast<ptrdiff_t>(offset), into.size(), into.begin());
    return true;
  };
}

// The layout found while the file is decoded whole (contiguous float32 data, int32 or float64
// labels) reads the same sample in place; the values are checked in place as a whole decode checks
// them; a file whose size changed is not read in place; chunked data has no layout.
TEST(DeepCamHdf5, ALayoutFoundOnceReadsTheSampleInPlace) {
  const fs::path dir = fresh_dir("in-place");
  std::vector<int32_t> labels(4 * 6, 0);
  labels[5] = 1, labels[23] = 2;
  const std::vector<std::byte> file = slurp(write_sample(dir / "data-a.h5", 4, 6, labels));
  Sample whole{std::vector<float>(4 * 6 * 16), std::vector<int32_t>(4 * 6)};
  std::optional<SampleLayout> layout;
  decode_sample(file, "a", 4, 6, 16, {whole.data, whole.labels}, layout);
  ASSERT_TRUE(layout.has_value());
  EXPECT_EQ(layout->file_bytes, file.size());
  EXPECT_EQ(layout->labels_type, LabelType::i32le);
  Sample row{std::vector<float>(4 * 6 * 16, -1), std::vector<int32_t>(4 * 6, -1)};
  std::vector<std::byte> scratch;
  ASSERT_TRUE(read_sample_in_place(ranges_of(file), *layout, "a", 4, 6, 16, {row.data, row.labels}, scratch));
  EXPECT_EQ(row.data, whole.data);
  EXPECT_EQ(row.labels, labels);

  std::vector<std::byte> longer = file;
  longer.push_back(std::byte{0});
  EXPECT_FALSE(read_sample_in_place(ranges_of(longer), *layout, "a", 4, 6, 16, {row.data, row.labels}, scratch));

  std::vector<std::byte> bad = file;  // the same file, a value changed in place: refused as a whole decode refuses it
  const float nan = std::nanf("");
  std::memcpy(bad.data() + layout->data_offset + ((1 * 6 + 2) * 16 + 3) * 4, &nan, 4);
  try {
    read_sample_in_place(ranges_of(bad), *layout, "a", 4, 6, 16, {row.data, row.labels}, scratch);
    ADD_FAILURE() << "nan read in place";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "a: climate/data holds nan at pixel (1, 2) channel 3: the data must be finite");
  }
  bad = file;
  const int32_t three = 3;
  std::memcpy(bad.data() + layout->labels_offset + 7 * 4, &three, 4);
  try {
    read_sample_in_place(ranges_of(bad), *layout, "a", 4, 6, 16, {row.data, row.labels}, scratch);
    ADD_FAILURE() << "label 3 read in place";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "a: climate/labels_0 holds 3.000000 at pixel (1, 1): labels must be 0, 1 or 2");
  }

  Hdf5Writer f64((dir / "data-f.h5").string());
  const std::vector<double> float_labels(4 * 6, 1.0);
  f64.write("climate/data", {4, 6, 16}, std::span<const float>(whole.data));
  f64.write("climate/labels_0", {4, 6}, std::span<const double>(float_labels));
  f64.commit();
  const std::vector<std::byte> f64_file = slurp(dir / "data-f.h5");
  decode_sample(f64_file, "f", 4, 6, 16, {whole.data, whole.labels}, layout);
  ASSERT_TRUE(layout.has_value());
  EXPECT_EQ(layout->labels_type, LabelType::f64le);
  ASSERT_TRUE(read_sample_in_place(ranges_of(f64_file), *layout, "f", 4, 6, 16, {row.data, row.labels}, scratch));
  EXPECT_EQ(row.labels, std::vector<int32_t>(4 * 6, 1));

  const H5Id dcpl{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  const hsize_t chunk[3] = {2, 6, 16};
  ASSERT_GE(H5Pset_chunk(dcpl.id, 3, chunk), 0);
  const fs::path chunked = write_crafted(dir / "data-chunked.h5", dcpl.id, write_ramp);
  decode_sample(slurp(chunked), "c", 4, 6, 16, {whole.data, whole.labels}, layout);
  EXPECT_FALSE(layout.has_value()) << "chunked data is read through HDF5";
}

TEST(DeepCamHdf5, NonFiniteDataIsRefusedNamingFilePixelAndChannel) {
  const fs::path dir = fresh_dir("nan");
  for (const float bad : {std::nanf(""), -INFINITY}) {
    const fs::path file = write_crafted(dir / "data-nan.h5", H5P_DEFAULT, [&](hid_t set) {
      std::vector<float> values = ramp(4 * 6 * 16);
      values[(1 * 6 + 2) * 16 + 3] = bad;  // pixel (1, 2), channel 3
      H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    });
    EXPECT_EQ(sample_error(file, 4, 6), file.string() + ": climate/data holds " + (std::isnan(bad) ? "nan" : "-inf") +
                                            " at pixel (1, 2) channel 3: the data must be finite");
  }
}

// Issue 16 #22: every sample read leaked 72 bytes inside libhdf5_hl (H5LTopen_file_image's
// callback state). The heap in use must not grow with the number of samples decoded.
TEST(DeepCamHdf5, DecodingSamplesDoesNotGrowTheHeap) {
  const fs::path dir = fresh_dir("leak");
  const std::vector<std::byte> file = slurp(write_sample(dir / "data-a.h5", 4, 6, kNoLabels));
  for (int i = 0; i < 200; ++i) decode_sample(file, "a", 4, 6, 16);  // HDF5's free lists settle
  const size_t before = mallinfo2().uordblks;
  for (int i = 0; i < 2000; ++i) decode_sample(file, "a", 4, 6, 16);
  const size_t after = mallinfo2().uordblks;
  EXPECT_LT(after, before + 16 * 1024) << "the heap grew by " << (after - before) << " bytes over 2000 samples";
}
