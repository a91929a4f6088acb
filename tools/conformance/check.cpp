#include "check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string_view>

#include "mlph/core/host.hpp"
#include "mlph/sdk/graph/op_schema.hpp"
#include "mlph/sdk/model/backend.hpp"

namespace mlph::conformance {
namespace {

// Tolerances on relative_error(), per compute precision (backend.precision).
//
// fp32, one op: 1e-4. The unit roundoff is u = 2^-24 = 6e-8. A backend that only orders its sums
// differently (blocking, threads, vector lanes, a GEMM instead of loops) is off by about sqrt(K)*u
// for a K-term sum: K <= ~300 in these cases, so ~1e-6; batch-norm and softmax backward subtract
// nearly equal terms and lose one or two more digits (~1e-5), and the optimizers' 3 steps compound
// that little. 1e-4 leaves a 10x margin over that, and sits 10x below a 1e-3 relative error, which
// no re-association produces at these sizes but a real bug does (a missing or extra term, an
// off-by-one window, a wrong constant, a half-precision intermediate).
// fp32, whole model: 1e-3. Several steps of a deep net compound the per-op differences, and a
// max-pool or leaky-ReLU decision near a tie may go either way; the weight updates (not the
// weights, which hide small updates) must still agree to 0.1%.
//
// Reduced precisions round the operands of the ops the catalogue marks reduced_precision (conv,
// conv_transpose, dense) and accumulate in float32; every other op stays float32, and so does a
// row without those ops (tolerance_for(precision, graph)). The operands' rounding dominates: each
// product is off by up to 2u relative (u the format's unit roundoff), the float32 accumulation adds
// ~sqrt(K) * 6e-8 (nothing next to it at K <= 10^4), and a sum of random-sign products relative to
// its own size is off by a few u. So one op: 8u; a whole model (several steps, the error carried
// from layer to layer): 25u, both rounded to a round number.
//   tf32: 10 stored significand bits, u = 2^-11 = 4.9e-4: 4e-3 per op, 1.2e-2 per model.
//   fp16: the same 10 bits and u (its narrower range only matters below 6e-5, which the loss
//         scaling of a real run and the norm-wise error here both keep away): 4e-3 and 1.2e-2.
//   bf16: 7 stored bits, u = 2^-8 = 3.9e-3: 3e-2 per op and 1e-1 per model.
// At these precisions a 1e-3 fault cannot be told from rounding; wrong indices, terms and constants
// (errors of order 1) still fail.
const std::vector<Tolerance>& tolerances() {
  static const std::vector<Tolerance> table = {
      {"fp32", 1e-4, 1e-3}, {"tf32", 4e-3, 1.2e-2}, {"bf16", 3e-2, 1e-1}, {"fp16", 4e-3, 1.2e-2}};
  return table;
}

std::vector<MLPH_Tensor> views(std::vector<HostTensor>& tensors) {
  std::vector<MLPH_Tensor> out;
  for (HostTensor& t : tensors) out.push_back(t.view());
  return out;
}

const MLPH_Value& value_of(const MLPH_Graph& graph, int32_t index) { return graph.values[index]; }

// Turns `now` (a parameter after training) into its update, now - init, and returns the update's
// rounding floor (Observed::update_floors): relative_error of one ulp of every new parameter.
double rounding_floor(HostTensor& now, const float* init) {
  double ulp2 = 0, update2 = 0, ulp_max = 0, update_max = 0;
  for (size_t i = 0; i < now.numel(); ++i) {
    float& value = now.as<float>()[i];
    const float magnitude = std::abs(value);
    const double ulp = std::nextafter(magnitude, std::numeric_limits<float>::infinity()) - magnitude;
    value -= init[i];
    ulp2 += ulp * ulp, update2 += double{value} * value;
    ulp_max = std::max(ulp_max, ulp), update_max = std::max(update_max, double{std::abs(value)});
  }
  if (update_max == 0) return 0;
  return std::max(std::sqrt(ulp2 / update2), ulp_max / update_max);
}

struct Worst {
  std::optional<double> error;
  std::string failed;
};

// The largest error over matching tensors, and the first tensor over `tolerance` (for the reason).
Worst worst(const std::vector<HostTensor>& actual, const std::vector<HostTensor>& expected,
            const std::vector<HostTensor>* noisy, double tolerance, const char* kind, std::vector<TensorError>& all,
            const std::vector<double>* floors = nullptr) {
  Worst w;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double e = relative_error(actual[i], expected[i]);
    double allowed = tolerance;
    if (noisy) allowed = std::max(allowed, kNoiseFactor * relative_error((*noisy)[i], expected[i]));
    const double floor = floors ? (*floors)[i] : 0;
    const bool by_noise = allowed > tolerance, by_rounding = floor > allowed;
    allowed = std::max(allowed, floor);
    all.push_back({kind, expected[i].name, e, allowed, by_rounding ? "fp32 rounding" : by_noise ? "10x noise" : ""});
    const bool worse = !w.error || std::isnan(e) || (!std::isnan(*w.error) && e > *w.error);  // NaN sticks
    if (worse) w.error = e;
    if (!(e <= allowed) && w.failed.empty())
      w.failed = by_rounding ? fmt::format("{} '{}' {:.1e} > its fp32 rounding {:.1e}", kind, expected[i].name, e, floor)
                 : by_noise  ? fmt::format("{} '{}' {:.1e} > {:.0f} x noise {:.1e}", kind, expected[i].name, e,
                                           kNoiseFactor, allowed / kNoiseFactor)
                             : fmt::format("{} '{}' {:.1e}", kind, expected[i].name, e);
  }
  return w;
}

// The first tensor holding a NaN or infinity, or null.
const HostTensor* non_finite(const Observed& seen) {
  for (const auto* tensors : {&seen.forward, &seen.gradients, &seen.updates})
    for (const HostTensor& t : *tensors)
      for (size_t i = 0; i < t.numel(); ++i)
        if (!std::isfinite(t.at(i))) return &t;
  return nullptr;
}

}  // namespace

const Tolerance& tolerance_for(const std::string& precision) {
  const std::string name = precision == "f32" ? "fp32" : precision;  // the old spelling
  for (const Tolerance& t : tolerances())
    if (name == t.precision) return t;
  throw std::invalid_argument("unknown precision '" + precision + "' (fp32, tf32, bf16 or fp16)");
}

const std::vector<std::string>& precisions() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Tolerance& t : tolerances()) out.emplace_back(t.precision);
    return out;
  }();
  return names;
}

const Tolerance& tolerance_for(const Tolerance& precision, const MLPH_Graph& graph) {
  for (size_t i = 0; i < graph.n_nodes; ++i)
    if (const sdk::schema::Op* op = sdk::schema::find_op(graph.nodes[i].op); op && op->reduced_precision)
      return precision;
  return tolerance_for("fp32");
}

// Adam's step divides the gradient's average by its root mean square: an element whose gradient is
// within rounding of zero moves by a full step of either sign. In a reduced precision the gradient
// (held to the precision's tolerance) carries that rounding, so a few elements flip and the update's
// norm-wise error is about 2 sqrt(flipped share), whatever u is: 1.4e-1 measured on an H200 in bf16
// (cuda, adamw, 3 steps; 0.5% flipped). The optimizer itself computes in float32 at every precision
// and is held to fp32's 1e-4 in the fp32 rows; here its updates are only kept from being wrong in
// kind (a wrong term or sign moves every element: an error near 1 or above).
std::optional<double> update_tolerance_for(const Tolerance& row, const MLPH_Graph& graph) {
  const std::string name = graph.optimizer.name ? graph.optimizer.name : "";
  const bool adaptive = name == "adam" || name == "adamw" || name == "lamb";
  if (!adaptive || std::string_view(row.precision) == "fp32") return std::nullopt;
  return 3e-1;
}

std::string reduced_precision_ops() {
  std::string names;
  for (const sdk::schema::Op& op : sdk::schema::ops())
    if (op.reduced_precision) names += (names.empty() ? "" : ", ") + std::string(op.name);
  return names;
}

std::optional<Reported> reported_attributes(const LoadedBackend& backend) {
  const MLPH_BackendApi* api = backend.api();
  if (backend.plugin.descriptor->abi_minor < 6 || api->struct_size < MLPH_STRUCT_SIZE(MLPH_BackendApi, attributes) ||
      !api->attributes)
    return std::nullopt;
  MLPH_BackendAttributes a{};
  a.struct_size = sizeof a;
  core::check(api->attributes(backend.backend.get(), &a), "attributes");
  return Reported{a.precision ? a.precision : "fp32", a.deterministic != 0};
}

core::Owned<MLPH_Model> compile_model(const LoadedBackend& backend, const MLPH_Graph& graph) {
  MLPH_Model* raw = nullptr;
  try {
    core::check(backend.api()->compile(backend.backend.get(), &graph, nullptr, &raw), "compile");
  } catch (const core::PluginError& e) {
    if (e.code() == MLPH_UNIMPLEMENTED) throw NotImplemented(e.code(), e.what());
    throw;
  }
  return core::Owned<MLPH_Model>(raw, backend.api()->model_destroy);
}

void record_error(const std::string& backend, const core::PluginError& error, Row& row) {
  row.verdict = dynamic_cast<const NotImplemented*>(&error) ? Verdict::not_implemented : Verdict::fail;
  row.reason = backend + ": " + error.what();
}

bool compiles(const LoadedBackend& backend, const MLPH_Graph& graph, Row& row) {
  try {
    compile_model(backend, graph);
    return true;
  } catch (const core::PluginError& e) {
    record_error(backend.name, e, row);
    return false;
  }
}

Observed observe(const LoadedBackend& backend, const MLPH_Graph& graph, std::vector<HostTensor>& inputs,
                 const std::vector<double>& learning_rates, uint64_t first_step) {
  const MLPH_BackendApi* api = backend.api();
  const core::Owned<MLPH_Model> model = compile_model(backend, graph);
  std::vector<MLPH_Tensor> in = views(inputs);

  Observed seen;
  for (size_t i = 0; i < graph.n_eval_outputs; ++i)
    seen.forward.push_back(HostTensor::like(value_of(graph, graph.eval_outputs[i])));
  if (!seen.forward.empty()) {
    std::vector<MLPH_Tensor> out = views(seen.forward);
    core::check(api->eval_step(model.get(), in.data(), in.size(), out.data(), out.size()), "eval_step");
  }
  if (learning_rates.empty()) return seen;

  HostTensor losses = HostTensor::zeros("loss", MLPH_DTYPE_F64, {static_cast<int64_t>(learning_rates.size())});
  for (size_t s = 0; s < learning_rates.size(); ++s) {
    const MLPH_StepArgs args = mlph::sdk::step_args(learning_rates[s], first_step + s);
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
    core::check(api->train_step(model.get(), in.data(), in.size(), &args, &result), fmt::format("train_step {}", s));
    losses.as<double>()[s] = result.loss;
    for (size_t p = 0; s == 0 && p < graph.n_params; ++p) {
      if (!(graph.params[p].flags & MLPH_PARAM_TRAINABLE)) continue;
      HostTensor& g = seen.gradients.emplace_back(HostTensor::like(value_of(graph, graph.params[p].value)));
      MLPH_Tensor view = g.view();
      core::check(api->read_gradient(model.get(), p, &view), "read_gradient of '" + g.name + "'");
    }
  }
  seen.forward.push_back(std::move(losses));
  for (size_t p = 0; p < graph.n_params; ++p) {
    HostTensor& u = seen.updates.emplace_back(HostTensor::like(value_of(graph, graph.params[p].value)));
    MLPH_Tensor view = u.view();
    core::check(api->read_parameter(model.get(), p, &view), "read_parameter of '" + u.name + "'");
    seen.update_floors.push_back(rounding_floor(u, graph.params[p].init));
  }
  return seen;
}

void compare(const LoadedBackend& reference, const LoadedBackend& candidate, const MLPH_Graph& graph,
             std::vector<HostTensor>& inputs, const std::vector<double>& learning_rates, uint64_t first_step, Row& row,
             const Observed* noise) {
  Observed seen[2];
  const LoadedBackend* backends[2] = {&reference, &candidate};
  for (int b = 0; b < 2; ++b) {
    try {
      seen[b] = observe(*backends[b], graph, inputs, learning_rates, first_step);
    } catch (const core::PluginError& e) {
      record_error(backends[b]->name, e, row);
      return;
    }
  }
  const Observed &expected = seen[0], &actual = seen[1];
  if (const HostTensor* bad = non_finite(expected)) {  // nothing to compare with
    row.verdict = Verdict::fail;
    row.reason = fmt::format("{}: non-finite values in '{}'", reference.name, bad->name);
    return;
  }
  const Worst checks[] = {
      worst(actual.forward, expected.forward, noise ? &noise->forward : nullptr, row.tolerance, "output", row.tensors),
      worst(actual.gradients, expected.gradients, noise ? &noise->gradients : nullptr, row.tolerance, "gradient",
            row.tensors),
      worst(actual.updates, expected.updates, noise ? &noise->updates : nullptr,
            row.update_tolerance.value_or(row.tolerance), "update", row.tensors, &expected.update_floors)};
  row.forward = checks[0].error, row.gradient = checks[1].error, row.update = checks[2].error;
  for (const Worst& w : checks) {
    if (w.failed.empty()) continue;
    row.verdict = Verdict::fail;
    row.reason += (row.reason.empty() ? "" : ", ") + w.failed;
  }
}

}  // namespace mlph::conformance
