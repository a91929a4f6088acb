#include "borrow.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>

namespace mlph::cosmoflow {
namespace {
using sdk::fail;
using sdk::LoggedHparams;

// CosmoFlow logs the scaled (peak) rate and the scale: base_lr = peak / factor, reached from the
// warm-up start with linear scaling over base_batch_size = GBS / factor.
double scale(const LoggedHparams& h) {
  return h.has("opt_learning_rate_warmup_factor") ? h.number("opt_learning_rate_warmup_factor") : 1.0;
}

std::string base_lr(const LoggedHparams& h, const std::string& key) {
  const double s = scale(h);
  if (s <= 0) fail(MLPH_INVALID_ARGUMENT, "opt_learning_rate_warmup_factor must be > 0 to recover the base rate");
  return sdk::json_number(h.number(key) / s);
}

// 512 rather than 512.0, as a person writes it.
std::string plain(double v) {
  std::string text = sdk::json_number(v);
  if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
  return text;
}

std::string base_batch(const LoggedHparams& h, const std::string& key) {
  const double global = h.required("global_batch_size", key);
  const double base = global / scale(h);
  if (base < 1 || std::fabs(base - std::round(base)) > 1e-9)
    fail(MLPH_INVALID_ARGUMENT, "global_batch_size " + plain(global) + " / opt_learning_rate_warmup_factor " +
                                    plain(scale(h)) + " is not a whole batch size");
  return std::to_string(std::llround(base));
}

std::string linear(const LoggedHparams&, const std::string&) { return "linear"; }

// The reference logs only the largest decay factor: one factor is a list of one, which fits a
// single boundary only.
std::string decay_factors(const LoggedHparams& h, const std::string& key) {
  if (sdk::json_list_items(h.text(key))) return h.text(key);
  const auto boundaries = h.has("opt_learning_rate_decay_boundary_epochs")
                              ? sdk::json_list_items(h.text("opt_learning_rate_decay_boundary_epochs"))
                              : std::nullopt;
  if (boundaries && boundaries->size() > 1)
    fail(MLPH_INVALID_ARGUMENT, "one factor for " + std::to_string(boundaries->size()) +
                                    " boundaries: the reference logs only the largest factor, so the others are "
                                    "unknown; give the per-boundary factors as a list in a YAML");
  return "[" + h.text(key) + "]";
}

std::string sgd_only(const LoggedHparams& h, const std::string& key) {
  std::string name = sdk::json_string_value(h.text(key)).value_or("");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name != "sgd") fail(MLPH_INVALID_ARGUMENT, "MLPerf HPC rules: the CosmoFlow optimizer (opt_name) is sgd");
  return "";
}

std::string non_negative(const LoggedHparams& h, const std::string& key) {
  if (h.number(key) < 0) fail(MLPH_INVALID_ARGUMENT, "MLPerf HPC rules: must be >= 0");
  return "";
}

// The log keys of the closed-division tunables (REFERENCE §4.2); the schema holds the rules the
// core then applies to the config keys.
constexpr sdk::HparamRule kRules[] = {
    {"global_batch_size", "train.batch_size", sdk::per_rank_batch},
    {"opt_name", nullptr, sgd_only},
    {"sgd_opt_momentum", "optimizer.momentum", sdk::as_is},
    {"opt_base_learning_rate", "optimizer.base_lr", base_lr},
    {"opt_base_learning_rate", "optimizer.base_batch_size", base_batch},
    {"opt_base_learning_rate", "optimizer.scaling", linear},
    {"opt_learning_rate_warmup_factor", nullptr, non_negative},
    {"opt_learning_rate_warmup_epochs", "optimizer.warmup_epochs", sdk::as_is},
    {"opt_learning_rate_decay_boundary_epochs", "optimizer.decay_boundaries", sdk::as_is},
    {"opt_learning_rate_decay_factor", "optimizer.decay_factors", decay_factors},
    {"dropout", "model.dropout", sdk::as_is},
    {"opt_weight_decay", "optimizer.weight_decay", sdk::as_is},
};

}  // namespace

std::span<const sdk::HparamRule> hparam_rules() { return kRules; }

}  // namespace mlph::cosmoflow
