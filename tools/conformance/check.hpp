// Running one graph on two backends through the C ABI and comparing what they computed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mlph/core/host.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/core/session.hpp"
#include "tensor.hpp"

namespace mlph::conformance {

// A backend plug-in, loaded and created.
struct LoadedBackend {
  std::string name;
  core::LoadedPlugin plugin;  // declared first: the library outlives the backend it made
  core::Owned<MLPH_Backend> backend{nullptr, nullptr};
  const MLPH_BackendApi* api() const { return plugin.api<MLPH_BackendApi>(); }
};

// Pass bounds on relative_error() for one compute precision (backend.precision).
struct Tolerance {
  const char* precision;  // as the option names it: fp32, tf32, bf16, fp16
  double op;              // one op (or optimizer) on small random tensors
  double model;           // a whole model after several training steps
};
// "fp32", "tf32", "bf16" or "fp16" ("f32" too, the old spelling of fp32); throws otherwise.
const Tolerance& tolerance_for(const std::string& precision);
const std::vector<std::string>& precisions();
// The tolerance a row whose graph is `graph` is held to at `precision`: the precision's when the
// graph has an op the catalogue computes in reduced precision (op_schema.hpp: reduced_precision),
// fp32's otherwise, since every other op computes in float32 at any backend.precision.
const Tolerance& tolerance_for(const Tolerance& precision, const MLPH_Graph& graph);

// The bound on a row's updates where it is not its tolerance: an adaptive optimizer (adam, adamw,
// lamb) after ops in a reduced precision (check.cpp says why).
std::optional<double> update_tolerance_for(const Tolerance& row, const MLPH_Graph& graph);
// "conv, conv_transpose, dense": the ops a reduced precision applies to.
std::string reduced_precision_ops();

// What a backend of ABI 1.6 or later reports of itself (MLPH_BackendApi.attributes); empty for older ones.
struct Reported {
  std::string precision;
  bool deterministic = true;
};
std::optional<Reported> reported_attributes(const LoadedBackend& backend);

// What one backend computed for one graph (and what every backend is asked for).
struct Observed {
  std::vector<HostTensor> forward;    // eval_step outputs before training, then the losses of the steps
  std::vector<HostTensor> gradients;  // read_gradient of each trainable parameter after the first step
  std::vector<HostTensor> updates;    // each parameter after the last step minus its initial value
  // Per update, what it can resolve: an update is a difference of fp32 parameters, so a candidate that
  // rounds each new parameter one ulp the other way (an FMA, a gradient off in its last bits) differs
  // by this error however right it is (relative_error of one ulp of every parameter against the update).
  std::vector<double> update_floors;
};

// Compiles `graph`, evaluates, then trains one step per learning rate (steps first_step, first_step+1, ...).
// Throws core::PluginError naming the call that failed (NotImplemented: compile refused the graph).
Observed observe(const LoadedBackend& backend, const MLPH_Graph& graph, std::vector<HostTensor>& inputs,
                 const std::vector<double>& learning_rates, uint64_t first_step);

// NOT IMPLEMENTED: the backend refused the graph at compile with MLPH_UNIMPLEMENTED, as docs/ops.md
// asks of an op, attribute or optimizer it does not implement. A backend that implements a subset
// of the catalogue conforms for what it implements (see conforms()).
enum class Verdict { pass, fail, not_implemented };

// One compared tensor's error, for --verbose.
struct TensorError {
  std::string kind;  // "output", "gradient" or "update"
  std::string name;
  double error = 0;
  double allowed = 0;  // the row's tolerance, or above it the tensor's own bound:
  std::string raised_by;  // "" (none), "10x noise" (whole models) or "fp32 rounding" (an update's floor)
};

// One line of the table.
struct Row {
  Row(std::string op_, std::string description_, double tolerance_)
      : op(std::move(op_)), description(std::move(description_)), tolerance(tolerance_), rerun("--ops " + op) {}
  std::string op, description;
  std::optional<double> forward, gradient, update;  // worst relative_error of each kind; empty: not compared
  double tolerance = 0;
  std::optional<double> update_tolerance;  // where the updates are held to another bound (update_tolerance_for)
  Verdict verdict = Verdict::pass;
  std::string reason;  // for FAIL and NOT IMPLEMENTED
  std::vector<TensorError> tensors;  // every compared tensor, in graph order
  std::string rerun;  // the arguments that select this row alone: "--ops conv --case 3"
};

// compile_model's error when the backend refuses the graph with MLPH_UNIMPLEMENTED.
struct NotImplemented : core::PluginError {
  using core::PluginError::PluginError;
};

// Compiles `graph` for one rank. Throws NotImplemented, or core::PluginError for any other error.
core::Owned<MLPH_Model> compile_model(const LoadedBackend& backend, const MLPH_Graph& graph);

// Sets the row's verdict and reason for an error from `backend`: NOT IMPLEMENTED for a
// NotImplemented, else FAIL.
void record_error(const std::string& backend, const core::PluginError& error, Row& row);

// Whether `backend` compiles `graph`; if not, the row says why (see record_error).
bool compiles(const LoadedBackend& backend, const MLPH_Graph& graph, Row& row);

// Runs `graph` on both backends and fills in the row's errors and verdict. An MLPH_UNIMPLEMENTED
// error from either backend's compile is NOT IMPLEMENTED with its message; any other error, that
// code from a later call included, is a FAIL: once a backend compiles a graph, all of it is checked.
// `noise`, when given, is what the reference computed from inputs perturbed by a few units of
// roundoff: each tensor may then be off by kNoiseFactor times that perturbation's effect, when
// this is above the row's tolerance (see check_model).
void compare(const LoadedBackend& reference, const LoadedBackend& candidate, const MLPH_Graph& graph,
             std::vector<HostTensor>& inputs, const std::vector<double>& learning_rates, uint64_t first_step, Row& row,
             const Observed* noise = nullptr);
inline constexpr double kNoiseFactor = 10;

}  // namespace mlph::conformance
