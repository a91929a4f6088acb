// Whole-model checks: a workload's real graph trained a few steps on both backends.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "check.hpp"

namespace mlph::conformance {

struct ModelCheck {
  std::string workload;           // the workload plug-in's name
  std::vector<std::string> sets;  // a small configuration, as --set key=value
};

// CosmoFlow and DeepCAM, each in a configuration that trains in seconds on a CPU.
const std::vector<ModelCheck>& model_checks();

struct ModelSettings {
  std::vector<std::filesystem::path> plugin_dirs;
  int steps = 5;
  uint64_t seed = 1;
  const Tolerance* precision = nullptr;  // the graph's tolerance follows from it (tolerance_for)
};

// Builds the workload's graph, feeds identical random inputs to both backends for `steps`
// training steps (dropout on, the workload's learning rates, SGD with momentum 0.9) and compares
// the evaluation before training, every step's loss, the first step's gradients and every
// parameter's change, each within the tolerance or ten times its measured sensitivity to a 1e-6
// perturbation of the initial weights (models.cpp says why). Returns no row, with `note` saying
// why, when the workload plug-in is not installed.
std::optional<Row> check_model(const ModelCheck& check, const ModelSettings& settings, const LoadedBackend& reference,
                               const LoadedBackend& candidate, std::string& note);

}  // namespace mlph::conformance
