#include "mlph/core/results_tree.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>

#include "mlph/core/atomic_file.hpp"
#include "mlph/core/config.hpp"
#include "mlph/core/mllog.hpp"
#include "mlph/core/mllog_reader.hpp"
#include "mlph/core/shell_script.hpp"
#include "mlph/core/system_probe.hpp"
#include "mlph/core/text_input.hpp"
#include "mlph/sdk/util/numbers.hpp"

namespace mlph::core {
namespace fs = std::filesystem;

ResultsTree::ResultsTree(const fs::path& output, const std::string& org, const std::string& system_name,
                         const std::string& benchmark, bool weak)
    : org_dir(output / require_plain_name(org, "the organization (--org, mlperf.org)")),
      results(org_dir / "results" / require_plain_name(system_name, "the system name (--system, mlperf.platform)") / (weak ? "weak" : "strong") / benchmark),
      systems(org_dir / "systems"),
      implementation(org_dir / "benchmarks" / benchmark / "implementations" / "mlperf-hpc"),
      console(output / "console" / system_name / (weak ? "weak" : "strong") / benchmark),
      system(system_name) {}

fs::path ResultsTree::result(int i) const { return results / fmt::format("result_{}.txt", i); }
fs::path ResultsTree::system_json() const { return systems / (system + ".json"); }

bool ResultsTree::holds_results() const {
  if (!fs::exists(results)) return false;
  for (const auto& e : fs::directory_iterator(results))
    if (e.path().filename().string().rfind("result_", 0) == 0) return true;
  return false;
}

void write_code_reference(const fs::path& dir, const std::string& version, const std::vector<std::string>& command,
                          int runs, const std::string& config_file) {
  fs::create_directories(dir);
  std::string readme = fmt::format("# mlperf-hpc {0}\n\nThe runs in `results/` were made by `mlperf-run` of mlperf-hpc {0} "
                                   "(C++ runner with run-time plug-ins; the plug-in files and their hashes are in every "
                                   "log's `mlph_plugin` lines).\n\nCommand of run 0 ({1} runs, seeds differ):\n\n    ",
                                   version, runs);
  for (const auto& a : command) readme += shell_word(a) + ' ';  // to be copied into a shell: quoted
  write_whole_file(dir / "README.md", readme + "\n");
  if (!config_file.empty() && fs::exists(config_file))
    fs::copy_file(config_file, dir / fs::path(config_file).filename(), fs::copy_options::overwrite_existing);
}

namespace {

// Writes `fields` as a JSON object of strings: the official system-description checker joins
// the counts as text and fails on JSON numbers.
void write_json(const fs::path& file, const SystemFields& fields) {
  std::string out = "{\n";
  for (size_t i = 0; i < fields.size(); ++i)
    out += fmt::format("    {}: {}{}\n", json(fields[i].first).text, json(fields[i].second).text,
                       i + 1 < fields.size() ? "," : "");
  write_whole_file(file, out + "}\n");
}

std::string availability(const std::string& status) {
  if (status == "onprem") return "Available on-premise";
  if (status == "cloud") return "Available cloud";
  if (status == "preview") return "Preview";
  if (status == "research") return "Research, Development, or Internal (RDI)";
  return status;
}

}  // namespace

SystemFields read_system_info(const fs::path& file) {
  YAML::Node root;
  try {
    root = load_yaml(read_text_file(file, kMaxConfigBytes, "system description"), kMaxConfigNodes);
  } catch (const InputError& e) {
    throw ConfigError(fmt::format("--system-info {}", e.what()));
  } catch (const YamlError& e) {
    throw ConfigError(fmt::format("--system-info {}:{}: {}", file.string(), e.line, e.reason));
  }
  if (!root.IsMap()) throw ConfigError(fmt::format("--system-info {}: expected a map of system-description fields", file.string()));
  SystemFields fields;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar() || !(kv.second.IsScalar() || kv.second.IsNull()))
      throw ConfigError(fmt::format("--system-info {}:{}: expected a field name and a single value", file.string(),
                                    kv.first.Mark().line + 1));
    fields.emplace_back(kv.first.Scalar(), kv.second.IsScalar() ? kv.second.Scalar() : "");
  }
  return fields;
}

void write_system_json(const fs::path& file, const fs::path& log_file, const std::string& org,
                       const std::string& system, const std::string& version, const SystemFields& system_info) {
  const ParsedLog log = read_mllog(log_file);
  const auto value = [&](const std::string& key) {
    const LogLine* l = log.find(key);
    return l && l->value.IsScalar() ? l->value.Scalar() : std::string();
  };
  std::string plugins, backend;
  for (const LogLine* l : log.all("mlph_plugin")) {
    const std::string kind = l->value["kind"].as<std::string>(""), name = l->value["name"].as<std::string>("");
    plugins += fmt::format("{}{} {} {}", plugins.empty() ? "" : ", ", kind, name, l->value["version"].as<std::string>(""));
    if (kind == "backend") backend = name;
  }
  std::map<std::string, std::string> machine = detect_system();
  const long long accelerators = sdk::integer_value<long long>(value("accelerators_per_node")).value_or(0);
  // The accelerator as the backend states it in the log (ABI 1.6 attributes): the core reads no driver.
  std::string accelerator_name, accelerator_memory;
  if (const LogLine* device = log.find("mlph_backend_device"); device && device->value.IsMap()) {
    accelerator_name = device->value["name"].as<std::string>("");
    const auto bytes = device->value["memory_bytes"].as<unsigned long long>(0);
    if (bytes > 0) accelerator_memory = fmt::format("{} GB", bytes / 1000000000ULL);
  }
  SystemFields fields = {
      {"submitter", org},
      {"division", value("submission_division")},
      {"status", availability(value("submission_status"))},
      {"system_name", system},
      {"number_of_nodes", value("number_of_nodes")},
      {"host_processors_per_node", machine["host_processors_per_node"]},
      {"host_processor_model_name", machine["host_processor_model_name"]},
      {"host_processor_core_count", machine["host_processor_core_count"]},
      {"host_processor_vcpu_count", machine["host_processor_vcpu_count"]},
      {"host_processor_frequency", machine["host_processor_frequency"]},
      {"host_processor_caches", machine["host_processor_caches"]},
      {"host_processor_interconnect", ""},
      {"host_memory_capacity", machine["host_memory_capacity"]},
      {"host_storage_type", ""},
      {"host_storage_capacity", ""},
      {"host_networking", machine["host_networking"]},
      {"host_networking_topology", ""},
      {"host_memory_configuration", ""},
      {"accelerators_per_node", value("accelerators_per_node")},
      {"accelerator_model_name", accelerators > 0 ? accelerator_name : "N/A"},
      {"accelerator_host_interconnect", ""},
      {"accelerator_frequency", ""},
      {"accelerator_on-chip_memories", ""},
      {"accelerator_memory_configuration", ""},
      {"accelerator_memory_capacity", accelerators > 0 ? accelerator_memory : ""},
      {"accelerator_interconnect", ""},
      {"accelerator_interconnect_topology", ""},
      {"cooling", ""},
      {"hw_notes", ""},
      {"framework", fmt::format("mlperf-hpc {}{}", version, backend.empty() ? "" : " (" + backend + " backend)")},
      {"other_software_stack", fmt::format("{}; plug-ins: {}", machine["compiler"], plugins)},
      {"operating_system", machine["operating_system"]},
      {"sw_notes", ""},
  };
  for (const auto& [key, v] : system_info) {
    auto it = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == key; });
    if (it != fields.end()) it->second = v;
    else fields.emplace_back(key, v);
  }
  write_json(file, fields);
}

}  // namespace mlph::core
