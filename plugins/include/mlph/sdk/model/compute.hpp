// The options every backend shares (ABI 1.6): `precision`, the format its products compute in, and
// `deterministic`, whether a step's results must depend only on its inputs and state, bit for bit
// (config keys backend.precision and backend.deterministic). One reader, so that every backend
// spells, checks and refuses them alike; a backend says which precisions it computes in and reports
// what it does through Backend::attributes().
//
//   const sdk::ComputeSettings compute = sdk::read_compute_settings(options, {sdk::Precision::fp32}, "mine backend");
//   options.allow_only(sdk::with_compute_options({"threads"}), "mine backend");
#pragma once

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mlph/sdk/util/error.hpp"
#include "mlph/sdk/util/options.hpp"

namespace mlph::sdk {

// The compute precisions of backend.precision, named as MLPH_BackendAttributes.precision names them.
// Reduced precisions round what the ops the catalogue marks reduced_precision multiply (conv,
// conv_transpose, dense: op_schema.hpp) and accumulate in float32; parameters, optimizer state and
// every other op stay float32.
enum class Precision { fp32, tf32, bf16, fp16 };
inline constexpr Precision kPrecisions[] = {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16};

inline const char* precision_name(Precision p) {
  switch (p) {
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    case Precision::fp32: break;
  }
  return "fp32";
}

inline std::optional<Precision> precision_named(std::string_view name) {
  for (Precision p : kPrecisions)
    if (name == precision_name(p)) return p;
  return std::nullopt;
}

struct ComputeSettings {
  Precision precision = Precision::fp32;
  // Asked for bit-for-bit repeatable steps (conformance's state checks, a resumed run that must match
  // an unbroken one). Off by default: a device backend may then pick its fastest algorithms.
  bool deterministic = false;
};

inline constexpr const char* kPrecisionOption = "precision";
inline constexpr const char* kDeterministicOption = "deterministic";

// A backend's own option names plus the shared ones, for Options::allow_only.
inline std::vector<std::string> with_compute_options(std::vector<std::string> own) {
  own.emplace_back(kPrecisionOption);
  own.emplace_back(kDeterministicOption);
  return own;
}

// The shared options, checked: `precision` one of `supported` (default fp32, which every backend
// computes in), `deterministic` a switch (Options::get_bool; default false). Anything else is
// MLPH_INVALID_ARGUMENT in one line naming the option, the value and what is accepted.
inline ComputeSettings read_compute_settings(const Options& options, std::initializer_list<Precision> supported,
                                             const std::string& who) {
  ComputeSettings s;
  const std::string precision = options.get(kPrecisionOption, "fp32");
  const std::optional<Precision> named = precision_named(precision);
  if (!named || std::find(supported.begin(), supported.end(), *named) == supported.end()) {
    std::string accepted;
    for (Precision p : supported) accepted += (accepted.empty() ? "" : ", ") + std::string(precision_name(p));
    fail(MLPH_INVALID_ARGUMENT, who + ": option '" + kPrecisionOption + "' is '" + precision +
                                    "'; this backend computes in " + accepted);
  }
  s.precision = *named;
  s.deterministic = options.get_bool(kDeterministicOption, false, who);
  return s;
}

}  // namespace mlph::sdk
