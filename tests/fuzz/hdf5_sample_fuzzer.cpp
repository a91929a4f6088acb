// DeepCAM sample files (climate/data 4 x 6 x 16 float32, climate/labels_0 4 x 6), decoded from
// memory as the workload decodes them: no temporary files.
#include "data/hdf5_io.hpp"
#include "fuzz.hpp"

MLPH_FUZZ_ALLOCATIONS_FAIL_PAST_2GIB

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using mlph::deepcam::DataError;
  mlph::fuzz::refusing<DataError>([&] { mlph::deepcam::decode_sample(mlph::fuzz::bytes(data, size), "fuzz.h5", 4, 6, 16); });
  return 0;
}
