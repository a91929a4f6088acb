// Writes the seed corpus of the harnesses: small valid files (CosmoFlow's from its synthetic
// generator, DeepCAM's from a pattern), one folder per harness. The committed corpus/ was made with: build-fuzz/fuzz/make_corpus tests/fuzz/corpus
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "data/file_io.hpp"
#include "data/hdf5_io.hpp"
#include "data/npy.hpp"
#include "data/synthetic.hpp"
#include "data/tfrecord.hpp"

namespace fs = std::filesystem;
namespace cosmo = mlph::cosmoflow;
namespace deepcam = mlph::deepcam;

namespace {

void write_tfrecords(const fs::path& dir) {
  std::vector<cosmo::Sample> samples;
  for (uint64_t i = 0; i < 2; ++i) samples.push_back(cosmo::synthesize_sample(7, i, 4));
  for (const bool gzip : {false, true}) {
    const std::string kind = gzip ? "gzip" : "plain";
    cosmo::write_tfrecord_file((dir / (kind + "_one.tfrecord")).string(), std::span(samples).first(1), 4, {gzip, 6});
    cosmo::write_tfrecord_file((dir / (kind + "_two.tfrecord")).string(), samples, 4, {gzip, 6});
  }
}

void write_npy(const fs::path& dir) {
  cosmo::write_npy_sample((dir / "univ_0").string(), cosmo::synthesize_sample(7, 0, 4), 4);
}

void write_hdf5_samples(const fs::path& dir) {
  std::vector<float> data(4 * 6 * 16);
  std::vector<int32_t> labels(4 * 6);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i % 97) * 0.5f - 10.0f;
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 3);
  deepcam::Hdf5Writer out((dir / "data-0.h5").string());
  out.write("climate/data", {4, 6, 16}, std::span<const float>(data));
  out.write("climate/labels_0", {4, 6}, std::span<const int32_t>(labels));
  out.commit();
}

void write_hdf5_stats(const fs::path& dir) {
  std::vector<double> lo(16), hi(16);
  for (int c = 0; c < 16; ++c) lo[c] = -1.0 - c, hi[c] = 2.0 + 0.5 * c;
  deepcam::Hdf5Writer wide((dir / "stats64.h5").string());
  wide.write("climate/minval", {16}, std::span<const double>(lo));
  wide.write("climate/maxval", {16}, std::span<const double>(hi));
  wide.commit();
  const std::vector<float> lo32(lo.begin(), lo.end()), hi32(hi.begin(), hi.end());
  deepcam::Hdf5Writer narrow((dir / "stats32.h5").string());
  narrow.write("climate/minval", {16}, std::span<const float>(lo32));
  narrow.write("climate/maxval", {16}, std::span<const float>(hi32));
  narrow.commit();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_corpus DIR\n";
    return 2;
  }
  const fs::path root = argv[1];
  const std::pair<const char*, void (*)(const fs::path&)> harnesses[] = {
      {"tfrecord_fuzzer", write_tfrecords},
      {"npy_fuzzer", write_npy},
      {"hdf5_sample_fuzzer", write_hdf5_samples},
      {"hdf5_stats_fuzzer", write_hdf5_stats}};
  for (const auto& [name, write] : harnesses) {
    fs::create_directories(root / name);
    write(root / name);
  }
  return 0;
}
