// TFRecord files, plain and GZIP: the framing and CRCs, then tf.train.Example parsing of every
// record, then the CosmoFlow sample decoding (4^3 samples, up to 2 records a file); and GZIP input
// inflated by both engines of plugins/util's inflater, which must agree: the same bytes, or the
// same one-line error.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "data/example.hpp"
#include "data/gzip.hpp"
#include "data/tfrecord.hpp"
#include "fuzz.hpp"

using namespace mlph::cosmoflow;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = mlph::fuzz::bytes(data, size);
  mlph::fuzz::refusing<DataError>([&] {
    for_each_tfrecord(
        file, "fuzz.tfrecord",
        [](size_t, std::span<const std::byte> record) {
          mlph::fuzz::refusing<DataError>([&] { decode_example(record, "record"); });
        },
        max_tfrecord_bytes(4, 2));
  });
  mlph::fuzz::refusing<DataError>([&] { read_tfrecord_samples(file, "fuzz.tfrecord", 4, 2); });
  // The batch's fast path, read by ranges: what it takes, the whole decode takes with the same
  // sample; what it refuses, the whole decode refuses with the same line.
  const RangeReader ranges = [&](uint64_t offset, std::span<std::byte> into) {
    if (offset > file.size() || into.size() > file.size() - offset) return false;
    std::copy_n(file.begin() + static_cast<ptrdiff_t>(offset), into.size(), into.begin());
    return true;
  };
  Sample fast, whole;
  fast.x.resize(volume_elements(4));
  whole.x.resize(volume_elements(4));
  std::vector<std::byte> scratch;
  std::string fast_error, whole_error;
  bool in_place = false;
  try {
    in_place = read_tfrecord_sample_in_place(ranges, "fuzz.tfrecord", 4, {fast.x, fast.y}, scratch);
  } catch (const DataError& e) {
    fast_error = e.what();
  }
  if (in_place || !fast_error.empty()) {
    try {
      read_tfrecord_sample(file, "fuzz.tfrecord", 4, {whole.x, whole.y});
    } catch (const DataError& e) {
      whole_error = e.what();
    }
    if (fast_error != whole_error) std::abort();
    if (in_place && (fast.x != whole.x || std::memcmp(fast.y.data(), whole.y.data(), sizeof fast.y) != 0)) std::abort();
  }
  if (is_gzip(file)) {
    const auto inflated = [&](mlph::gzip::Engine engine) -> std::pair<std::vector<std::byte>, std::string> {
      try {
        return {gunzip(file, "fuzz.tfrecord", max_tfrecord_bytes(4, 2), engine), ""};
      } catch (const DataError& e) {
        return {{}, e.what()};
      }
    };
    if (inflated(mlph::gzip::Engine::libdeflate) != inflated(mlph::gzip::Engine::zlib)) std::abort();
  }
  return 0;
}
