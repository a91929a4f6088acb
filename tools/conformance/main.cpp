// mlperf-conformance: proves a backend plug-in computes what the reference backend computes, op by
// op (docs/ops.md) and on whole models, through the C ABI only, so it runs on any vendor's plug-in.
//   mlperf-conformance --backend onednn-cpu
//   mlperf-conformance --backend-file /opt/vendor/libmlph-backend-x.so --set backend.device=0 --markdown out.md
// Exit status: 0 conforms (nothing failed, something passed: the rows a backend does not implement
// are NOT IMPLEMENTED); 1 something failed, or nothing passed; 2 bad usage or a plug-in that cannot
// be loaded or created.
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>

#include "accumulation.hpp"
#include "cases.hpp"
#include "check.hpp"
#include "mlph/core/host.hpp"
#include "mlph/sdk/graph/op_schema.hpp"
#include "mlph/sdk/model/compute.hpp"
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
  std::string program;  // argv[0], for the reruns
  std::string backend, backend_file, reference = "reference", ops, markdown;
  std::string precision;  // empty: what the candidate reports (ABI 1.6), else fp32
  std::vector<std::string> plugin_dirs, sets;
  int cases = 6, model_steps = 5;
  int case_number = 0;  // --case: one row of the one check --ops names (1-based); 0: every row
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

// The chained-layer checks: `layers` (an op check, but of no single op or optimizer of the catalogue)
// and the whole models.
bool chained_layers(const std::string& name) {
  const std::vector<std::string>& ops = op_check_names();
  if (std::find(ops.begin(), ops.end(), name) != ops.end())
    return !sdk::schema::find_op(name) && !sdk::schema::find_optimizer(name) && name != "l2";
  const std::vector<ModelCheck>& models = model_checks();
  return std::any_of(models.begin(), models.end(), [&](const ModelCheck& m) { return m.workload == name; });
}

// --ops, or by default every check; in a reduced precision every check but the chained layers,
// which `notes` then names. At their small sizes some of their tensors (behind a max-pool tie, batch
// norm over few values) move by 5e-2 to 1 under bf16-sized rounding: no fixed tolerance holds them,
// and the models' noise bound (models.cpp) measures fp32-sized perturbations.
std::vector<std::string> selected_checks(const std::string& ops, const std::string& precision,
                                         std::vector<std::string>& notes) {
  std::vector<std::string> known = all_check_names();
  if (ops.empty() && precision != "fp32") {
    std::vector<std::string> chains;
    std::copy_if(known.begin(), known.end(), std::back_inserter(chains), chained_layers);
    std::erase_if(known, chained_layers);
    notes.push_back(fmt::format("{}: run in fp32 only, unless --ops names them (chained layers at these sizes move "
                                "some tensors beyond any fixed tolerance under {} rounding)",
                                fmt::join(chains, ", "), precision));
  }
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

// Loads the plug-in and creates a backend with `options`. Throws UsageError when the plug-in cannot be
// loaded, core::PluginError when create fails.
LoadedBackend make_backend(const core::PluginLoader& loader, const std::string& name, const std::string& file,
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
  core::check(b.api()->create(core::host_api(), kv.data(), kv.size(), &raw), "backend " + b.name);
  b.backend = core::Owned<MLPH_Backend>(raw, b.api()->destroy);
  return b;
}

// A backend as the user gave it: one that cannot be created is bad usage too.
LoadedBackend load_backend(const core::PluginLoader& loader, const std::string& name, const std::string& file,
                           const std::vector<std::pair<std::string, std::string>>& options) {
  try {
    return make_backend(loader, name, file, options);
  } catch (const core::PluginError& e) {
    throw UsageError(e.what());
  }
}

// The candidate as the bitwise rows (state) need it: created again with backend.deterministic=1 where it
// has the shared options (ABI 1.6), and then reporting that it is deterministic. `held` keeps that copy.
Bitwise bitwise_candidate(const core::PluginLoader& loader, const Settings& s, const LoadedBackend& candidate,
                          std::optional<LoadedBackend>& held) {
  if (candidate.plugin.descriptor->abi_minor < 6) return {&candidate, "", false, ""};
  const std::string note = " (backend.deterministic=1)";
  std::vector<std::pair<std::string, std::string>> options = backend_options(s.sets);
  std::erase_if(options, [](const auto& option) { return option.first == sdk::kDeterministicOption; });
  options.emplace_back(sdk::kDeterministicOption, "1");
  try {
    held.emplace(make_backend(loader, s.backend, s.backend_file, options));
  } catch (const core::PluginError& e) {
    return {nullptr, candidate.name + ": backend.deterministic=1: " + e.what(), e.code() == MLPH_UNIMPLEMENTED, note};
  }
  if (const std::optional<Reported> reported = reported_attributes(*held); reported && !reported->deterministic)
    return {nullptr,
            candidate.name + " reports deterministic 0 with backend.deterministic=1, and these rows compare bit for bit",
            false, note};
  return {&*held, "", false, note};
}

// An argument as a POSIX shell reads it back.
std::string shell_quoted(const std::string& arg) {
  const bool plain = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                           "0123456789_-+=/.,:@%") == std::string::npos;
  if (plain) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// This command less its choice of checks: a row's own arguments (Row::rerun) complete it.
std::string rerun_command(const Settings& s, const std::string& precision) {
  std::vector<std::string> args = {s.program};
  if (s.backend_file.empty()) args.insert(args.end(), {"--backend", s.backend});
  else args.insert(args.end(), {"--backend-file", s.backend_file});
  for (const std::string& dir : s.plugin_dirs) args.insert(args.end(), {"--plugin-dir", dir});
  if (s.reference != "reference") args.insert(args.end(), {"--reference", s.reference});
  for (const std::string& set : s.sets) args.insert(args.end(), {"--set", set});
  args.insert(args.end(), {"--seed", std::to_string(s.seed), "--precision", precision});
  std::string out;
  for (const std::string& arg : args) out += (out.empty() ? "" : " ") + shell_quoted(arg);
  return out;
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
      "precision", po::value(&s.precision),
      "tolerances for the candidate's compute precision: fp32, tf32, bf16 or fp16 (default: what it reports, else "
      "fp32)")("case", po::value(&s.case_number), "only the Nth row (from 1) of the one check --ops names")(
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
  } else if (s.cases < 1 || s.model_steps < 0 || s.case_number < 0) {
    throw UsageError("--cases must be >= 1, --model-steps >= 0 and --case >= 1");
  } else if (s.case_number > 0 && split(s.ops).size() != 1) {
    throw UsageError("--case " + std::to_string(s.case_number) + ": name one check with --ops");
  } else if (!s.precision.empty() && s.precision != "f32" &&
             std::find(precisions().begin(), precisions().end(), s.precision) == precisions().end()) {
    throw UsageError("--precision " + s.precision + ": expected fp32, tf32, bf16 or fp16");
  }
  if (s.precision == "f32") s.precision = "fp32";  // the old spelling
  s.program = argv[0];
  return s;
}

Report run_checks(const Settings& s, const std::vector<std::string>& checks, const LoadedBackend& reference,
                  const LoadedBackend& candidate, const Tolerance& tolerance, const Bitwise& bitwise) {
  const auto selected = [&](const std::string& name) { return std::find(checks.begin(), checks.end(), name) != checks.end(); };
  const std::string fp32_others =
      tolerance.precision == std::string("fp32")
          ? ""
          : fmt::format(", on the rows whose graph has an op computed in {} ({}); fp32's {:.0e} and {:.0e} on the others",
                        tolerance.precision, reduced_precision_ops(), tolerance_for("fp32").op, tolerance_for("fp32").model);
  Report report;
  report.header = {
      fmt::format("mlperf-conformance: candidate '{}' ({}) vs '{}' ({}); seed {}, {} cases per op, precision {}",
                  candidate.name, candidate.plugin.file.string(), reference.name, reference.plugin.file.string(), s.seed,
                  s.cases, tolerance.precision),
      "err = max(||c-r||_2/||r||_2, max|c-r|/max|r|) over the worst tensor (c candidate, r reference); "
      "fwd: evaluation outputs and training losses, grad: dL/dparameter after the first step, "
      "update: every parameter's change after the last step (running statistics included)",
      fmt::format("tolerance ({}): {:.0e} per op and optimizer, {:.0e} for a whole model after several steps{}",
                  tolerance.precision, tolerance.op, tolerance.model, fp32_others)};
  report.rerun = rerun_command(s, tolerance.precision);
  for (const std::string& name : checks) {
    if (std::find(op_check_names().begin(), op_check_names().end(), name) == op_check_names().end()) continue;
    const int first = s.case_number > 0 ? s.case_number - 1 : 0, end = s.case_number > 0 ? s.case_number : s.cases;
    for (int i = first; i < end; ++i) {
      OpCase c = make_case(name, i, s.seed);
      const Tolerance& bound = tolerance_for(tolerance, *c.graph->graph());
      Row row(c.op, c.description, bound.op);
      row.update_tolerance = update_tolerance_for(bound, *c.graph->graph());
      row.rerun = fmt::format("--ops {} --case {}", name, i + 1);
      compare(reference, candidate, *c.graph->graph(), c.inputs, c.learning_rates, c.first_step, row);
      report.rows.push_back(std::move(row));
    }
  }
  if (selected("validation"))
    for (Row& row : check_validation(candidate, s.case_number)) report.rows.push_back(std::move(row));
  if (selected("accumulation")) report.rows.push_back(check_accumulation(candidate, tolerance, s.seed));
  if (selected("state"))
    for (Row& row : check_training_state(bitwise, s.seed, s.case_number)) report.rows.push_back(std::move(row));
  ModelSettings model{{s.plugin_dirs.begin(), s.plugin_dirs.end()}, s.model_steps, s.seed, &tolerance};
  for (const ModelCheck& m : model_checks()) {
    if (!selected(m.workload)) continue;
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

// --precision, else what the candidate reports (ABI 1.6), else fp32.
const Tolerance& candidate_precision(const Settings& s, const LoadedBackend& candidate) {
  if (!s.precision.empty()) return tolerance_for(s.precision);
  const std::optional<Reported> reported = reported_attributes(candidate);
  if (!reported) return tolerance_for("fp32");
  if (std::find(precisions().begin(), precisions().end(), reported->precision) == precisions().end())
    throw UsageError(fmt::format("{} reports precision '{}', which has no tolerance: give --precision", candidate.name,
                                 reported->precision));
  return tolerance_for(reported->precision);
}

}  // namespace

int main(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  try {
    bool help = false;
    const Settings s = parse(argc, argv, help);
    if (help) return 0;
    const core::PluginLoader loader(core::default_search_path({s.plugin_dirs.begin(), s.plugin_dirs.end()}));
    const LoadedBackend reference = load_backend(loader, s.reference, "", {});
    const LoadedBackend candidate = load_backend(loader, s.backend, s.backend_file, backend_options(s.sets));
    const Tolerance& tolerance = candidate_precision(s, candidate);
    std::vector<std::string> notes;
    const std::vector<std::string> checks = selected_checks(s.ops, tolerance.precision, notes);
    std::optional<LoadedBackend> deterministic;
    const Bitwise bitwise = std::find(checks.begin(), checks.end(), "state") == checks.end()
                                ? Bitwise{}
                                : bitwise_candidate(loader, s, candidate, deterministic);

    Report report = run_checks(s, checks, reference, candidate, tolerance, bitwise);
    report.notes.insert(report.notes.end(), notes.begin(), notes.end());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << text_table(report) << (s.verbose ? failed_tensors(report) : "") << reruns(report)
              << summary(report, seconds) << std::endl;
    if (!s.markdown.empty()) {
      std::ofstream out(s.markdown);
      const std::string rerun = reruns(report);
      out << markdown_table(report) << "\n" << (rerun.empty() ? "" : "```\n" + rerun + "```\n\n")
          << summary(report, seconds) << "\n";
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
