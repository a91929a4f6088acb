#include "accumulation.hpp"

#include <fmt/format.h>

#include "mlph/sdk/model/backend.hpp"
#include "small_model.hpp"

namespace mlph::conformance {
namespace {

using namespace small;

constexpr int kWindow = 2, kUpdates = 2;
constexpr double kLearningRate = 0.05;

// Each parameter's change since `initial`: the weights themselves would hide a wrong small update.
std::vector<HostTensor> changes(std::vector<HostTensor> now, const std::vector<HostTensor>& initial) {
  for (size_t p = 0; p < now.size(); ++p)
    for (size_t i = 0; i < now[p].numel(); ++i) now[p].as<float>()[i] -= initial[p].as<float>()[i];
  return now;
}

}  // namespace

Row check_accumulation(const LoadedBackend& backend, const Tolerance& precision, uint64_t seed) {
  const Weights w = random_weights(seed);
  const auto batch_graph = make_graph(kBatch, 1, w, sgd_momentum());
  const auto micro_graph = make_graph(kBatch / kWindow, kWindow, w, sgd_momentum());
  const double tolerance = tolerance_for(precision, *micro_graph->graph()).op;
  Row row("accumulation",
          fmt::format("{} updates of {} micro-batches of {} vs batch {}: dense, tanh, dense, mse, l2, sgd momentum",
                      kUpdates, kWindow, kBatch / kWindow, kBatch),
          tolerance);
  std::vector<HostTensor> whole = random_batch(seed);
  try {
    Trainer one(backend, *batch_graph->graph()), split(backend, *micro_graph->graph());
    const std::vector<HostTensor> initial = split.parameters();
    HostTensor expected_loss = HostTensor::zeros("loss", MLPH_DTYPE_F64, {kUpdates});
    HostTensor actual_loss = HostTensor::zeros("loss", MLPH_DTYPE_F64, {kUpdates});
    std::vector<HostTensor> expected_grad, actual_grad;
    for (int u = 0; u < kUpdates; ++u) {
      expected_loss.as<double>()[u] = one.step(whole, sdk::step_args(kLearningRate, u));
      if (u == 0) expected_grad = one.gradients();
      for (int k = 0; k < kWindow; ++k) {
        const int64_t micro = int64_t{u} * kWindow + k, per = kBatch / kWindow;
        std::vector<HostTensor> part = rows(whole, k * per, per);
        const bool apply = k == kWindow - 1;
        actual_loss.as<double>()[u] += split.step(part, sdk::step_args(kLearningRate, u, micro, apply));
        if (micro == 0 && !bitwise_equal(split.parameters(), initial)) {
          row.verdict = Verdict::fail;
          row.reason = "the parameters moved on a micro-batch with apply_update 0";
          return row;
        }
      }
      if (u == 0) actual_grad = split.gradients();
    }
    row.forward = relative_error(actual_loss, expected_loss);
    row.gradient = worst_error(actual_grad, expected_grad);
    row.update = worst_error(changes(split.parameters(), initial), changes(one.parameters(), initial));
  } catch (const core::PluginError& e) {
    record_error(backend.name, e, row);
    return row;
  }
  for (const auto& [what, error] : {std::pair{"loss", row.forward}, {"gradient", row.gradient}, {"parameter", row.update}}) {
    if (*error <= tolerance) continue;
    row.verdict = Verdict::fail;
    row.reason += fmt::format("{}{} {:.1e}", row.reason.empty() ? "" : ", ", what, *error);
  }
  return row;
}

}  // namespace mlph::conformance
