#include "settings.hpp"

#include <string>

#include "mlph/sdk/comms/spatial.hpp"
#include "mlph/sdk/util/error.hpp"

namespace mlph::cosmoflow {
using sdk::fail;
Settings parse_settings(const sdk::Options& c) {
  Settings s;
  s.model.kernel_size = c.get_int<int>("model.kernel_size", 3);
  s.model.conv_size = c.get_int<int>("model.conv_size", 32);
  s.model.n_conv_layers = c.get_int<int>("model.n_conv_layers", 5);
  s.model.fc1_size = c.get_int<int>("model.fc1_size", 128);
  s.model.fc2_size = c.get_int<int>("model.fc2_size", 64);
  s.model.dropout = c.get_number("model.dropout");
  s.model.weight_decay = c.get_number("optimizer.weight_decay");
  s.momentum = c.get_number("optimizer.momentum");
  s.schedule.base_lr = c.get_number("optimizer.base_lr");
  s.schedule.scaling = c.get("optimizer.scaling");
  s.schedule.base_batch_size = c.get_int<int>("optimizer.base_batch_size", 64, 1);
  s.schedule.warmup_epochs = c.get_int<int>("optimizer.warmup_epochs", 4);
  s.schedule.decay_boundaries = c.get_ints<int>("optimizer.decay_boundaries");
  s.schedule.decay_factors = c.get_numbers("optimizer.decay_factors");
  s.batch_size = c.get_int<uint32_t>("train.batch_size", 4);
  s.epochs = c.get_int<uint32_t>("train.epochs", 128);
  s.target_mae = c.get_number("train.target_mae");
  s.data.dir = c.get("data.dir");
  s.data.format = c.get("data.format");
  s.data.edge = c.get_int<int>("data.edge", 128, 1);
  s.data.train_samples = c.get_int<uint64_t>("data.train_samples", 0);
  s.data.valid_samples = c.get_int<uint64_t>("data.valid_samples", 0);
  s.data.records_per_file = c.get_int<int>("data.records_per_file", 1);
  s.data.cache = c.get_bool("data.cache", false, "cosmoflow");
  s.data.inflate = c.get("data.inflate", "libdeflate");
  s.model.edge = s.data.edge;
  s.synthetic_train = c.get_int<uint64_t>("data.synthetic.train", 256);
  s.synthetic_valid = c.get_int<uint64_t>("data.synthetic.valid", 64);
  s.synthetic_seed = c.get_int<uint64_t>("data.synthetic.seed", 1);
  s.synthetic_format = c.get("data.synthetic.format", "tfrecord_gzip");
  s.schedule.global_batch_size = s.batch_size * c.get_int<uint64_t>("run.world_size", 1);

  if (s.schedule.scaling != "linear" && s.schedule.scaling != "sqrt" && s.schedule.scaling != "none")
    fail(MLPH_INVALID_ARGUMENT, "'optimizer.scaling' = '" + s.schedule.scaling + "': must be linear, sqrt or none");
  if (s.schedule.decay_boundaries.size() != s.schedule.decay_factors.size())
    fail(MLPH_INVALID_ARGUMENT, "'optimizer.decay_boundaries' and 'optimizer.decay_factors' must have the same length");
  if (s.data.format != "tfrecord" && s.data.format != "npy")
    fail(MLPH_INVALID_ARGUMENT, "'data.format' = '" + s.data.format + "': must be tfrecord or npy");
  if (s.data.inflate != "libdeflate" && s.data.inflate != "zlib")
    fail(MLPH_INVALID_ARGUMENT, "'data.inflate' = '" + s.data.inflate + "': must be libdeflate or zlib");
  // Each block halves the edge: it must divide by 2^n_conv_layers (halved in a loop, so that no
  // count shifts a 1 out of range).
  const int n = s.model.n_conv_layers;
  int halvings = 0;
  for (int e = s.data.edge; e % 2 == 0 && halvings < n; e /= 2) ++halvings;
  if (halvings < n)
    fail(MLPH_INVALID_ARGUMENT, "'data.edge' = " + std::to_string(s.data.edge) + ": must be a multiple of " +
                                    (n < 63 ? std::to_string(uint64_t{1} << n) : "2^" + std::to_string(n)) +
                                    " (2^model.n_conv_layers: each block halves it)");
  const std::string grid = c.get("parallel.spatial", "1");
  s.model.grid = sdk::spatial::parse_grid(grid, "parallel.spatial");
  if (s.model.grid == std::vector<int64_t>{1}) s.model.grid = {1, 1, 1};
  if (s.model.grid.size() != 3)
    fail(MLPH_INVALID_ARGUMENT, "'parallel.spatial' = " + grid + ": CosmoFlow splits D, H and W: give three factors, "
                                    "e.g. 2x1x1");
  return s;
}

}  // namespace mlph::cosmoflow
