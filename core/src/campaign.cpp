#include "mlph/core/campaign.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "mlph/core/config.hpp"
#include "mlph/core/mllog.hpp"
#include "mlph/core/mllog_reader.hpp"

extern char** environ;

namespace mlph::core {
namespace fs = std::filesystem;
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_stop(int) { g_stop = true; }

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "unknown";
}

// A `mlperf:` key as the run will see it: the last --set, else the config file, else "".
std::string configured(const RunOptions& run, const std::string& key) {
  for (auto it = run.sets.rbegin(); it != run.sets.rend(); ++it)
    if (it->rfind("mlperf." + key + "=", 0) == 0) return it->substr(key.size() + 8);
  if (run.config_file.empty()) return "";
  try {
    const YAML::Node node = YAML::LoadFile(run.config_file)["mlperf"][key];
    return node && node.IsScalar() ? node.Scalar() : "";
  } catch (const YAML::Exception&) {
    return "";  // the run itself reports a broken config file
  }
}

// Distinct positive seeds: from --seed upwards, or drawn fresh.
std::vector<uint64_t> campaign_seeds(const RunOptions& run, int n) {
  std::vector<uint64_t> seeds;
  std::set<uint64_t> used;
  std::random_device device;
  for (int i = 0; i < n; ++i) {
    uint64_t seed = run.seed ? *run.seed + static_cast<uint64_t>(i) : 0;
    while (seed == 0 || used.count(seed)) seed = (static_cast<uint64_t>(device()) << 16 ^ device()) % 2147483647ULL + 1;
    used.insert(seed);
    seeds.push_back(seed);
  }
  return seeds;
}

// The command line of one run: the campaign's own options, minus the campaign.
std::vector<std::string> run_command(const RunOptions& run, const CampaignOptions& c, uint64_t seed,
                                     const fs::path& dir, const std::string& log_name) {
  std::vector<std::string> args;
  std::istringstream launcher(c.launcher);
  for (std::string word; launcher >> word;) args.push_back(word);
  args.push_back(c.executable.string());
  const auto add = [&](const char* flag, const std::string& value) {
    if (!value.empty()) args.insert(args.end(), {flag, value});
  };
  add("--workload", run.workload);
  add("--backend", run.backend);
  add("--comms", run.comms);
  add("--storage", run.storage);
  add("--config", run.config_file);
  add("--data", run.data_dir);
  add("--division", run.division);
  for (const auto& dir_path : run.plugin_dirs) add("--plugin-dir", dir_path.string());
  for (const auto& s : run.sets) add("--set", s);
  add("--borrow-hparams", c.borrow_hparams);
  add("--seed", std::to_string(seed));
  add("--output", dir.string());
  add("--log-name", log_name);
  return args;
}

// Starts `args`; its output goes to `console` when given, else to ours. Returns the pid.
pid_t launch(const std::vector<std::string>& args, const fs::path& console) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!console.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, console.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  pid_t pid = 0;
  const int error = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) throw std::runtime_error(fmt::format("cannot start {}: {}", args[0], std::strerror(error)));
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string read_first_line(const fs::path& file, const std::string& prefix) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  return "";
}

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\"");
  const auto last = s.find_last_not_of(" \t\"");
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

void write_code_reference(const fs::path& dir, const RunOptions& run, const CampaignOptions& c, int runs) {
  fs::create_directories(dir);
  std::ofstream readme(dir / "README.md");
  readme << "# mlperf-hpc " << c.version << "\n\n"
         << "The runs in `results/` were made by `mlperf-run` of mlperf-hpc " << c.version
         << " (C++ runner with run-time plug-ins; the plug-in files and their hashes are in every log's "
         << "`mlph_plugin` lines).\n\nCommand of run 0 (" << runs << " runs, seeds differ):\n\n    ";
  for (const auto& a : run_command(run, c, run.seed.value_or(0), "<results dir>", "result_0.txt")) readme << a << ' ';
  readme << "\n";
  if (!run.config_file.empty() && fs::exists(run.config_file))
    fs::copy_file(run.config_file, dir / fs::path(run.config_file).filename(), fs::copy_options::overwrite_existing);
}

// Writes `fields` as a JSON object of strings: the official system-description checker joins
// the counts as text and fails on JSON numbers.
void write_json(const fs::path& file, const std::vector<std::pair<std::string, std::string>>& fields) {
  std::ofstream out(file);
  out << "{\n";
  for (size_t i = 0; i < fields.size(); ++i)
    out << "    " << json(fields[i].first).text << ": " << json(fields[i].second).text << (i + 1 < fields.size() ? "," : "")
        << "\n";
  out << "}\n";
}

std::string availability(const std::string& status) {
  if (status == "onprem") return "Available on-premise";
  if (status == "cloud") return "Available cloud";
  if (status == "preview") return "Preview";
  if (status == "research") return "Research, Development, or Internal (RDI)";
  return status;
}

// The system description: the fields the package checker requires, from the first log and this
// machine, then whatever the user's YAML says.
void write_system_json(const fs::path& file, const fs::path& log_file, const CampaignOptions& c,
                       const std::string& org, const std::string& system) {
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
  const long long accelerators = std::atoll(value("accelerators_per_node").c_str());
  std::vector<std::pair<std::string, std::string>> fields = {
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
      {"accelerator_model_name", accelerators > 0 ? machine["accelerator_model_name"] : "N/A"},
      {"accelerator_host_interconnect", ""},
      {"accelerator_frequency", ""},
      {"accelerator_on-chip_memories", ""},
      {"accelerator_memory_configuration", ""},
      {"accelerator_memory_capacity", accelerators > 0 ? machine["accelerator_memory_capacity"] : ""},
      {"accelerator_interconnect", ""},
      {"accelerator_interconnect_topology", ""},
      {"cooling", ""},
      {"hw_notes", ""},
      {"framework", fmt::format("mlperf-hpc {}{}", c.version, backend.empty() ? "" : " (" + backend + " backend)")},
      {"other_software_stack", fmt::format("{}; plug-ins: {}", machine["compiler"], plugins)},
      {"operating_system", machine["operating_system"]},
      {"sw_notes", ""},
  };
  if (!c.system_info.empty()) {
    const YAML::Node extra = YAML::LoadFile(c.system_info.string());
    if (!extra.IsMap()) throw ConfigError(fmt::format("{}: expected a map of system-description fields", c.system_info.string()));
    for (const auto& kv : extra) {
      const std::string key = kv.first.Scalar(), v = kv.second.IsScalar() ? kv.second.Scalar() : "";
      auto it = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == key; });
      if (it != fields.end()) it->second = v;
      else fields.emplace_back(key, v);
    }
  }
  write_json(file, fields);
}

}  // namespace

int required_runs(const std::string& benchmark) {
  static const std::map<std::string, int> counts = {{"cosmoflow", 10}, {"deepcam", 5}, {"oc20", 5}, {"openfold", 10}};
  const auto it = counts.find(benchmark);
  return it == counts.end() ? 5 : it->second;
}

std::map<std::string, std::string> detect_system() {
  std::map<std::string, std::string> info;
  std::set<std::string> sockets, cores;
  std::string socket;
  int vcpus = 0;
  {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
      if (key == "processor") ++vcpus;
      if (key == "model name" && info["host_processor_model_name"].empty()) info["host_processor_model_name"] = value;
      if (key == "physical id") socket = value, sockets.insert(value);
      if (key == "core id") cores.insert(socket + ":" + value);
    }
  }
  const size_t n_sockets = std::max<size_t>(sockets.size(), 1);
  info["host_processors_per_node"] = std::to_string(n_sockets);
  info["host_processor_vcpu_count"] = std::to_string(vcpus);
  info["host_processor_core_count"] = std::to_string(cores.empty() ? vcpus : cores.size() / n_sockets);
  if (std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); f) {
    long khz = 0;
    f >> khz;
    if (khz > 0) info["host_processor_frequency"] = fmt::format("{} MHz", khz / 1000);
  }
  std::string caches;
  for (int i = 0; i < 8; ++i) {
    const fs::path dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}", i);
    if (!fs::exists(dir)) break;
    const std::string level = read_first_line(dir / "level", ""), type = read_first_line(dir / "type", ""),
                      size = read_first_line(dir / "size", "");
    caches += fmt::format("{}L{}{} {}", caches.empty() ? "" : ", ", level,
                          type == "Data" ? "d" : type == "Instruction" ? "i" : "", size);
  }
  info["host_processor_caches"] = caches;
  const std::string mem = trim(read_first_line("/proc/meminfo", "MemTotal:"));
  if (!mem.empty()) info["host_memory_capacity"] = fmt::format("{} GB", std::atoll(mem.c_str()) / (1024 * 1024));
  // Accelerators: NVIDIA's driver lists one directory per GPU.
  std::map<std::string, int> gpus;
  if (fs::exists("/proc/driver/nvidia/gpus"))
    for (const auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus"))
      ++gpus[trim(read_first_line(e.path() / "information", "Model:"))];
  for (const auto& [name, n] : gpus)
    info["accelerator_model_name"] += fmt::format("{}{}", info["accelerator_model_name"].empty() ? "" : ", ", name);
  std::string networks;
  if (fs::exists("/sys/class/infiniband"))
    for (const auto& e : fs::directory_iterator("/sys/class/infiniband"))
      networks += (networks.empty() ? "InfiniBand: " : ", ") + e.path().filename().string();
  info["host_networking"] = networks;
  std::string os = trim(read_first_line("/etc/os-release", "PRETTY_NAME="));
  utsname u{};
  if (uname(&u) == 0) os += fmt::format("{}Linux {}", os.empty() ? "" : ", ", u.release);
  info["operating_system"] = trim(os);
  info["compiler"] = fmt::format("built with GCC {}", __VERSION__);
  return info;
}

int run_campaign(const RunOptions& run, const CampaignOptions& c) {
  std::string benchmark = run.workload.empty() ? Config::peek_workload(run.config_file).value_or("") : run.workload;
  if (benchmark.empty()) {
    std::fprintf(stderr, "mlperf-run: error: --runs: no workload: give --workload NAME or `workload:` in the config\n");
    return 2;
  }
  const int required = required_runs(benchmark);
  const int runs = c.runs > 0 ? c.runs : required;
  std::string org = c.org.empty() ? configured(run, "org") : c.org;
  if (org.empty()) org = "mlperf-hpc";
  std::string system = c.system.empty() ? configured(run, "platform") : c.system;
  if (system.empty()) system = host_name();
  const fs::path org_dir = run.output_dir / org;
  const fs::path dir = org_dir / "results" / system / (c.weak ? "weak" : "strong") / benchmark;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().rfind("result_", 0) == 0) {
        std::fprintf(stderr, "mlperf-run: error: %s already holds result files: give another --output or --system\n",
                     dir.c_str());
        return 2;
      }
  if (runs < required)
    std::fprintf(stderr, "note: %d runs; a %s %s submission needs %s %d\n", runs, benchmark.c_str(),
                 c.weak ? "throughput" : "time-to-solution", c.weak ? "at least" : "exactly", required);

  RunOptions each = run;  // the tree's names go into every log
  each.sets.push_back("mlperf.org=" + org);
  each.sets.push_back("mlperf.platform=" + system);
  fs::create_directories(dir);
  fs::create_directories(org_dir / "systems");
  write_code_reference(org_dir / "benchmarks" / benchmark / "implementations" / "mlperf-hpc", each, c, runs);
  const fs::path console_dir = run.output_dir / "console" / system / (c.weak ? "weak" : "strong") / benchmark;
  if (c.weak) fs::create_directories(console_dir);

  std::signal(SIGINT, on_stop);  // the runs see Ctrl-C too and log "aborted"; we start no more
  std::signal(SIGTERM, on_stop);
  const std::vector<uint64_t> seeds = campaign_seeds(run, runs);
  std::vector<int> exit_codes(runs, -1);
  try {
    if (c.weak) {  // all instances at once, output to console/<...>/run_<i>.log
      std::vector<pid_t> pids;
      for (int i = 0; i < runs; ++i)
        pids.push_back(launch(run_command(each, c, seeds[i], dir, fmt::format("result_{}.txt", i)),
                              console_dir / fmt::format("run_{}.log", i)));
      std::fprintf(stderr, "started %d %s instances (output in %s)\n", runs, benchmark.c_str(), console_dir.c_str());
      for (int i = 0; i < runs; ++i) exit_codes[i] = wait_for(pids[i]);
    } else {
      for (int i = 0; i < runs && !g_stop; ++i) {
        std::fprintf(stderr, "=== run %d/%d, seed %llu ===\n", i + 1, runs, static_cast<unsigned long long>(seeds[i]));
        exit_codes[i] = wait_for(launch(run_command(each, c, seeds[i], dir, fmt::format("result_{}.txt", i)), {}));
        if (exit_codes[i] == 2) break;  // a configuration error: every run would fail the same way
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlperf-run: error: %s\n", e.what());
    return 2;
  }

  int converged = 0, first_log = -1;
  for (int i = 0; i < runs; ++i) {
    converged += exit_codes[i] == 0;
    if (first_log < 0 && fs::exists(dir / fmt::format("result_{}.txt", i))) first_log = i;
  }
  if (first_log >= 0) {
    try {
      write_system_json(org_dir / "systems" / (system + ".json"), dir / fmt::format("result_{}.txt", first_log), c, org,
                        system);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlperf-run: error: writing the system description: %s\n", e.what());
      return 2;
    }
  }
  std::fprintf(stderr, "%d of %d runs converged; submission tree: %s\n", converged, runs, org_dir.c_str());
  if (first_log >= 0) std::fprintf(stderr, "score and check it: mlperf-score score %s; mlperf-score check %s\n",
                                   org_dir.c_str(), org_dir.c_str());
  if (std::find(exit_codes.begin(), exit_codes.end(), 2) != exit_codes.end()) return 2;
  return converged == runs ? 0 : 1;
}

}  // namespace mlph::core
