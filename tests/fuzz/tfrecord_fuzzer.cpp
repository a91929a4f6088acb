// TFRecord files, plain and GZIP: the framing and CRCs, then tf.train.Example parsing of every
// record, then the CosmoFlow sample decoding (4^3 samples, up to 2 records a file).
#include "data/example.hpp"
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
  return 0;
}
