// mlperf-conformance: proves a backend plug-in computes what the reference backend computes, op by
// op (docs/ops.md) and on whole models, through the C ABI only, so it runs on any vendor's plug-in.
//   mlperf-conformance --backend onednn-cpu
//   mlperf-conformance --backend-file /opt/vendor/libmlph-backend-x.so --set backend.device=0 --markdown out.md
// Exit status: 0 conforms (nothing failed, something passed: the rows a backend does not implement
// are NOT IMPLEMENTED); 1 something failed, or nothing passed; 2 bad usage or a plug-in that cannot
// be loaded or created.
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iostream>

#include "accumulation.hpp"
#include "cases.hpp"
#include "check.hpp"
#include "mlph/core/host.hpp"
#include "models.hpp"
#include "report.hpp"
#include "training_state.hpp"
#include "validation.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace mlph;
using namespace mlph::conformance;

namespace {

// Bad usage, or a plug-in that cannot be loaded or created: exit 2 with this one line.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Settings {
  std::string backend, backend_file, reference = "reference", ops, markdown, precision = "f32";
  std::vector<std::string> plugin_dirs, sets;
  int cases = 6, model_steps = 5;
  uint64_t seed = 1;
  bool verbose = false;
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= list.size();) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The op checks, the graph rules, gradient accumulation, the training state, then the model checks: every name --ops accepts.
std::vector<std::string> all_check_names() {
  std::vector<std::string> names = op_check_names();
  names.push_back("validation");
  names.push_back("accumulation");
  names.push_back("state");
  for (const ModelCheck& m : model_checks()) names.push_back(m.workload);
  return names;
}

std::vector<std::string> selected_checks(const std::string& ops) {
  const std::vector<std::string> known = all_check_names();
  if (ops.empty()) return known;
  std::vector<std::string> selected = split(ops);
  for (const std::string& name : selected)
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw UsageError(fmt::format("--ops: unknown check '{}' (known: {})", name, fmt::format("{}", fmt::join(known, ","))));
  return selected;
}

// "backend.KEY=VALUE" -> (KEY, VALUE): options for the candidate backend's create.
std::vector<std::pair<std::string, std::string>> backend_options(const std::vector<std::string>& sets) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string prefix = "backend.";
  for (const std::string& set : sets) {
    const size_t eq = set.find('=');
    if (set.rfind(prefix, 0) != 0 || eq == std::string::npos || eq == prefix.size())
      throw UsageError(fmt::format("--set '{}': expected backend.KEY=VALUE (options for the candidate backend)", set));
    out.emplace_back(set.substr(prefix.size(), eq - prefix.size()), set.substr(eq + 1));
  }
  return out;
}

// libmlph-backend-NAME.so -> NAME.
std::string name_from_file(const fs::path& file) {
  const std::string base = file.filename().string(), prefix = "libmlph-backend-", suffix = ".so";
  if (base.size() <= prefix.size() + suffix.size() || base.rfind(prefix, 0) != 0 ||
      base.compare(base.size() - suffix.size(), suffix.size(), suffix) != 0)
    throw UsageError(fmt::format("--backend-file {}: a backend plug-in is named libmlph-backend-NAME.so", file.string()));
  return base.substr(prefix.size(), base.size() - prefix.size() - suffix.size());
}

LoadedBackend load_backend(const core::PluginLoader& loader, const std::string& name, const std::string& file,
                           const std::vector<std::pair<std::string, std::string>>& options) {
  LoadedBackend b;
  try {
    b.name = file.empty() ? name : name_from_file(file);
    b.plugin = file.empty() ? loader.load(MLPH_KIND_BACKEND, name)
                            : core::PluginLoader::load_file(fs::absolute(file), MLPH_KIND_BACKEND, b.name);
  } catch (const core::LoadError& e) {
    throw UsageError(e.what());
  }
  std::vector<MLPH_KeyValue> kv;
  for (const auto& [key, value] : options) kv.push_back({key.c_str(), value.c_str()});
  MLPH_Backend* raw = nullptr;
  try {
    core::check(b.api()->create(core::host_api(), kv.data(), kv.size(), &raw), "backend " + b.name);
  } catch (const core::PluginError& e) {
    throw UsageError(e.what());
  }
  b.backend = core::Owned<MLPH_Backend>(raw, b.api()->destroy);
  return b;
}

Settings parse(int argc, char** argv, bool& help) {
  Settings s;
  po::options_description cli(
      "mlperf-conformance: compare a backend plug-in with the reference, op by op and on whole models\n\noptions");
  cli.add_options()("help,h", "show this help")("backend,b", po::value(&s.backend), "candidate backend plug-in, by name")(
      "backend-file", po::value(&s.backend_file), "candidate backend plug-in file (libmlph-backend-NAME.so)")(
      "reference", po::value(&s.reference), "the backend to compare with (default: reference)")(
      "plugin-dir", po::value(&s.plugin_dirs)->composing(), "plug-in directory (repeatable)")(
      "ops", po::value(&s.ops), "comma-separated checks (default: all; see --list)")(
      "list", "list the checks and exit")("cases", po::value(&s.cases), "random cases per op (default 6)")(
      "seed", po::value(&s.seed), "seed of the random cases and inputs (default 1)")(
      "model-steps", po::value(&s.model_steps), "training steps of the whole-model checks (default 5; 0: skip them)")(
      "precision", po::value(&s.precision), "tolerances for the candidate's compute precision: f32 (default) or bf16")(
      "set,s", po::value(&s.sets)->composing(), "backend.KEY=VALUE option for the candidate (repeatable)")(
      "markdown", po::value(&s.markdown), "also write the table to FILE as Markdown")(
      "verbose,v", po::bool_switch(&s.verbose), "after the table, every tensor's error for each failed row");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, cli), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (vm.count("help")) {
    std::cout << cli << "\n";
    help = true;
  } else if (vm.count("list")) {
    for (const std::string& name : all_check_names()) std::cout << name << "\n";
    help = true;
  } else if (s.backend.empty() && s.backend_file.empty()) {
    throw UsageError("give the candidate backend: --backend NAME or --backend-file PATH");
  } else if (!s.backend.empty() && !s.backend_file.empty() && name_from_file(s.backend_file) != s.backend) {
    throw UsageError("--backend " + s.backend + " disagrees with --backend-file " + s.backend_file + "; give one");
  } else if (s.cases < 1 || s.model_steps < 0) {
    throw UsageError("--cases must be >= 1 and --model-steps >= 0");
  } else if (std::find(precisions().begin(), precisions().end(), s.precision) == precisions().end()) {
    throw UsageError("--precision " + s.precision + ": expected f32 or bf16");
  }
  return s;
}

Report run_checks(const Settings& s, const std::vector<std::string>& checks, const LoadedBackend& reference,
                  const LoadedBackend& candidate) {
  const Tolerance& tolerance = tolerance_for(s.precision);
  Report report;
  report.header = {
      fmt::format("mlperf-conformance: candidate '{}' ({}) vs '{}' ({}); seed {}, {} cases per op, precision {}",
                  candidate.name, candidate.plugin.file.string(), reference.name, reference.plugin.file.string(), s.seed,
                  s.cases, s.precision),
      "err = max(||c-r||_2/||r||_2, max|c-r|/max|r|) over the worst tensor (c candidate, r reference); "
      "fwd: evaluation outputs and training losses, grad: dL/dparameter after the first step, "
      "update: every parameter's change after the last step (running statistics included)",
      fmt::format("tolerance ({}): {:.0e} per op and optimizer, {:.0e} for a whole model after several steps",
                  s.precision, tolerance.op, tolerance.model)};
  for (const std::string& name : checks) {
    if (std::find(op_check_names().begin(), op_check_names().end(), name) == op_check_names().end()) continue;
    for (OpCase& c : make_cases(name, s.cases, s.seed)) {
      Row row(c.op, c.description, tolerance.op);
      compare(reference, candidate, *c.graph->graph(), c.inputs, c.learning_rates, c.first_step, row);
      report.rows.push_back(std::move(row));
    }
  }
  if (std::find(checks.begin(), checks.end(), "validation") != checks.end())
    for (Row& row : check_validation(candidate)) report.rows.push_back(std::move(row));
  if (std::find(checks.begin(), checks.end(), "accumulation") != checks.end())
    report.rows.push_back(check_accumulation(candidate, tolerance.op, s.seed));
  if (std::find(checks.begin(), checks.end(), "state") != checks.end())
    for (Row& row : check_training_state(candidate, s.seed)) report.rows.push_back(std::move(row));
  ModelSettings model{{s.plugin_dirs.begin(), s.plugin_dirs.end()}, s.model_steps, s.seed, tolerance.model};
  for (const ModelCheck& m : model_checks()) {
    if (std::find(checks.begin(), checks.end(), m.workload) == checks.end()) continue;
    if (s.model_steps == 0) {
      report.notes.push_back(m.workload + ": skipped: --model-steps 0");
      continue;
    }
    std::string note;
    if (auto row = check_model(m, model, reference, candidate, note)) report.rows.push_back(std::move(*row));
    else report.notes.push_back(note);
  }
  return report;
}

}  // namespace

int main(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  try {
    bool help = false;
    const Settings s = parse(argc, argv, help);
    if (help) return 0;
    const std::vector<std::string> checks = selected_checks(s.ops);
    const core::PluginLoader loader(core::default_search_path({s.plugin_dirs.begin(), s.plugin_dirs.end()}));
    const LoadedBackend reference = load_backend(loader, s.reference, "", {});
    const LoadedBackend candidate = load_backend(loader, s.backend, s.backend_file, backend_options(s.sets));

    const Report report = run_checks(s, checks, reference, candidate);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << text_table(report) << (s.verbose ? failed_tensors(report) : "") << summary(report, seconds)
              << std::endl;
    if (!s.markdown.empty()) {
      std::ofstream out(s.markdown);
      out << markdown_table(report) << "\n" << summary(report, seconds) << "\n";
      if (!out) throw UsageError("--markdown: cannot write " + s.markdown);
    }
    return conforms(report) ? 0 : 1;
  } catch (const UsageError& e) {
    std::cerr << "mlperf-conformance: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mlperf-conformance: error: " << e.what() << "\n";
    return 1;
  }
}
