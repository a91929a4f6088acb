// The command line of the smallest CosmoFlow run, for the tests that start mlperf-run: each file had
// its own copy of these arguments, which drifted apart only where a test meant it to (batch, seed).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace mlph::test {

// A CosmoFlow run on 32^3 samples, `batch` a step, open division (so a test may set a generous
// target). Ends in a space: a test appends its own flags (seed, epochs, warm-up).
inline std::string tiny_cosmoflow(uint32_t batch) {
  return "--workload cosmoflow --division open --set data.edge=32 --set train.batch_size=" + std::to_string(batch) +
         " ";
}

// What a tiny run appends to generate its synthetic data set into `dir` (`train` and `valid` samples).
inline std::string generate_data(uint32_t train, uint32_t valid, const std::filesystem::path& dir) {
  return "--set data.synthetic.train=" + std::to_string(train) +
         " --set data.synthetic.valid=" + std::to_string(valid) + " --generate-data " + dir.string();
}

}  // namespace mlph::test
