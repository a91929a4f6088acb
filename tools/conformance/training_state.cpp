#include "training_state.hpp"

#include <fmt/format.h>

#include "mlph/sdk/graph/op_schema.hpp"
#include "mlph/sdk/model/backend.hpp"
#include "small_model.hpp"

namespace mlph::conformance {
namespace {

using namespace small;

constexpr int kWindow = 2;
constexpr double kLearningRate = 0.05;

const std::vector<Optimizer>& optimizers() {
  const std::vector<sdk::AttrInit> adam = {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-6}, {"weight_decay", 0.01}};
  std::vector<sdk::AttrInit> lamb = adam;
  lamb.emplace_back("max_grad_norm", 0.5);  // small enough that the clip acts
  static const std::vector<Optimizer> table = {sgd_momentum(), {"adam", adam}, {"adamw", adam}, {"lamb", lamb}};
  return table;
}

bool has_state_calls(const LoadedBackend& backend) {
  const MLPH_BackendApi* api = backend.api();
  return backend.plugin.descriptor->abi_minor >= 4 && api->struct_size >= MLPH_STRUCT_SIZE(MLPH_BackendApi, write_state) &&
         api->read_state && api->write_state;
}

// Micro-batch `micro` (global count) of the run: its rows of `batch`, its update, whether it ends a window.
double train_micro_batch(Trainer& trainer, const std::vector<HostTensor>& batch, int64_t micro) {
  const int64_t per = kBatch / kWindow, k = micro % kWindow;
  std::vector<HostTensor> part = rows(batch, k * per, per);
  const auto update = static_cast<uint64_t>(micro / kWindow);
  return trainer.step(part, sdk::step_args(kLearningRate, update, static_cast<uint64_t>(micro), k == kWindow - 1));
}

Row check_optimizer(const Bitwise& candidate, const Optimizer& optimizer, uint64_t seed) {
  Row row("state." + optimizer.name,
          fmt::format("read_state/write_state ({}, pending_gradient) mid-window: the copy trains bitwise alike{}",
                      fmt::join(sdk::schema::find_optimizer(optimizer.name)->state, ", "), candidate.note),
          0.0);
  if (!candidate.backend) {
    row.verdict = candidate.unimplemented ? Verdict::not_implemented : Verdict::fail;
    row.reason = candidate.why;
    return row;
  }
  const LoadedBackend& backend = *candidate.backend;
  if (!has_state_calls(backend)) {
    row.verdict = Verdict::not_implemented;
    row.reason = fmt::format("{}: no read_state / write_state (ABI {}.{})", backend.name,
                             backend.plugin.descriptor->abi_major, backend.plugin.descriptor->abi_minor);
    return row;
  }
  const std::vector<HostTensor> batch = random_batch(seed);
  try {
    const auto graph = make_graph(kBatch / kWindow, kWindow, random_weights(seed), optimizer);
    Trainer a(backend, *graph->graph()), b(backend, *graph->graph());
    constexpr int64_t kSaved = 2 * kWindow + 1, kEnd = 4 * kWindow;  // saved inside the third window
    for (int64_t micro = 0; micro < kSaved; ++micro) train_micro_batch(a, batch, micro);
    b.set_parameters(a.parameters());
    for (const char* slot : sdk::schema::find_optimizer(optimizer.name)->state) b.set_state(slot, a.state(slot));
    b.set_state(sdk::kPendingGradientSlot, a.state(sdk::kPendingGradientSlot));
    for (int64_t micro = kSaved; micro < kEnd; ++micro) {
      const double expected = train_micro_batch(a, batch, micro), actual = train_micro_batch(b, batch, micro);
      if (expected != actual) {
        row.verdict = Verdict::fail;
        row.reason = fmt::format("micro-batch {}: loss {} on the copy, {} on the original", micro, actual, expected);
        return row;
      }
    }
    const std::vector<HostTensor> expected = a.parameters(), actual = b.parameters();
    row.update = worst_error(actual, expected);
    if (!bitwise_equal(actual, expected)) {
      row.verdict = Verdict::fail;
      row.reason = fmt::format("the copy's parameters differ from the original's (relative error {:.1e})", *row.update);
    }
  } catch (const core::PluginError& e) {
    record_error(backend.name, e, row);
  }
  return row;
}

}  // namespace

std::vector<Row> check_training_state(const Bitwise& candidate, uint64_t seed, int only) {
  std::vector<Row> rows;
  for (size_t i = 0; i < optimizers().size(); ++i) {
    if (only != 0 && static_cast<size_t>(only) != i + 1) continue;
    Row& row = rows.emplace_back(check_optimizer(candidate, optimizers()[i], seed));
    row.rerun = fmt::format("--ops state --case {}", i + 1);
  }
  return rows;
}

}  // namespace mlph::conformance
