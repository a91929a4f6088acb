#include "settings.hpp"

#include <sstream>

#include "mlph/sdk/util/error.hpp"

namespace mlph::deepcam {
namespace {
using sdk::fail;

// A count of at least one, as uint32_t (the schema bounds it the same way).
uint32_t positive(const sdk::Options& c, const std::string& key, uint32_t fallback) {
  return c.get_int<uint32_t>(key, fallback, 1);
}

}  // namespace

Settings parse_settings(const sdk::Options& c) {
  Settings s;
  OptimizerSettings& o = s.optimizer;
  o.name = c.get("optimizer.name", o.name);
  o.lr = c.get_number("optimizer.lr");
  const std::vector<double> betas = c.get_numbers("optimizer.betas");
  if (betas.size() != 2)
    fail(MLPH_INVALID_ARGUMENT, "'optimizer.betas' = '" + c.get("optimizer.betas") + "': must be two numbers");
  o.beta1 = betas[0], o.beta2 = betas[1];
  o.eps = c.get_number("optimizer.eps");
  o.weight_decay = c.get_number("optimizer.weight_decay");
  o.max_grad_norm = c.get_number("optimizer.max_grad_norm");
  if (o.name != "LAMB" && o.name != "AdamW" && o.name != "Adam")
    fail(MLPH_INVALID_ARGUMENT, "'optimizer.name' = '" + o.name + "': must be LAMB, AdamW or Adam");

  ScheduleSettings& sc = s.schedule;
  sc.start_lr = o.lr;
  sc.type = c.get("scheduler.type", sc.type);
  sc.milestones = c.get_ints<int64_t>("scheduler.milestones");
  sc.decay_rate = c.get_number("scheduler.decay_rate");
  sc.t_max = c.get_int<int64_t>("scheduler.t_max", sc.t_max);
  sc.eta_min = c.get_number("scheduler.eta_min");
  sc.warmup_steps = c.get_int<int64_t>("scheduler.lr_warmup_steps", sc.warmup_steps);
  sc.warmup_factor = c.get_number("scheduler.lr_warmup_factor");
  if (sc.type != "multistep" && sc.type != "cosine_annealing")
    fail(MLPH_INVALID_ARGUMENT, "'scheduler.type' = '" + sc.type + "': must be multistep or cosine_annealing");

  s.batch_size = positive(c, "train.batch_size", 2);
  s.epochs = positive(c, "train.epochs", 200);
  s.target_iou = c.get_number("train.target_iou");
  TrainingSettings& t = s.training;
  t.batchnorm_group_size = positive(c, "train.batchnorm_group_size", 1);
  t.gradient_accumulation_frequency = positive(c, "train.gradient_accumulation_frequency", 1);
  if (const int64_t world = c.get_int<int64_t>("run.world_size", 1); world % t.batchnorm_group_size != 0)
    fail(MLPH_INVALID_ARGUMENT, "'train.batchnorm_group_size' = " + std::to_string(t.batchnorm_group_size) +
                                    ": must divide the " + std::to_string(world) + " ranks of this run");

  DataSettings& d = s.data;
  d.dir = c.get("data.dir");
  d.height = c.get_int<int>("data.height", d.height);
  d.width = c.get_int<int>("data.width", d.width);
  d.channels = c.get_int<int>("data.channels", d.channels);
  d.train_samples = c.get_int<uint64_t>("data.train_samples", 0);
  d.valid_samples = c.get_int<uint64_t>("data.valid_samples", 0);
  for (const char* key : {"data.height", "data.width"}) {
    const int v = c.get_int<int>(key, 16);
    if (v % 16 != 0)
      fail(MLPH_INVALID_ARGUMENT, std::string("'") + key + "' = " + std::to_string(v) +
                                      ": must be a multiple of 16 (the encoder's output stride)");
  }
  s.synthetic.train = c.get_int<uint64_t>("data.synthetic.train", 256);
  s.synthetic.valid = c.get_int<uint64_t>("data.synthetic.valid", 64);
  s.synthetic.seed = c.get_int<uint64_t>("data.synthetic.seed", 1);
  return s;
}

}  // namespace mlph::deepcam
