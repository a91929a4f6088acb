// TFRecord files, plain and GZIP: the framing and CRCs, then tf.train.Example parsing of every
// record, then the CosmoFlow sample decoding (4^3 samples, up to 2 records a file); and GZIP input
// inflated by both engines of plugins/util's inflater, which must agree: the same bytes, or the
// same one-line error.
#include <cstdlib>
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
