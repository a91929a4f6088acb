// DeepCAM's stats.h5 (climate/minval and climate/maxval of 16 channels), decoded from memory.
#include "data/hdf5_io.hpp"
#include "fuzz.hpp"

MLPH_FUZZ_ALLOCATIONS_FAIL_PAST_2GIB

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using mlph::deepcam::DataError;
  mlph::fuzz::refusing<DataError>([&] { mlph::deepcam::decode_stats(mlph::fuzz::bytes(data, size), "stats.h5", 16); });
  return 0;
}
