#include "mlph/core/campaign.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <set>
#include <sstream>

#include "mlph/core/benchmark.hpp"
#include "mlph/core/config.hpp"
#include "mlph/core/results_tree.hpp"
#include "mlph/core/shell_script.hpp"
#include "mlph/core/spawn.hpp"
#include "mlph/core/system_probe.hpp"

namespace mlph::core {
namespace fs = std::filesystem;
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_stop(int) { g_stop = true; }

// A `mlperf:` key as the run will see it: the last --set, else the config file, else "". A broken
// config file is refused here (ConfigError), before any run.
std::string configured(const RunOptions& run, const std::string& key) {
  for (auto it = run.sets.rbegin(); it != run.sets.rend(); ++it)
    if (it->rfind("mlperf." + key + "=", 0) == 0) return it->substr(key.size() + 8);
  return run.config_file.empty() ? "" : Config::peek(run.config_file, "mlperf." + key).value_or("");
}

// Distinct positive seeds: from --seed upwards, or drawn fresh.
std::vector<uint64_t> campaign_seeds(const RunOptions& run, int n) {
  std::vector<uint64_t> seeds;
  std::set<uint64_t> used;
  for (int i = 0; i < n; ++i) {
    uint64_t seed = run.seed ? *run.seed + static_cast<uint64_t>(i) : 0;
    while (seed == 0 || used.count(seed)) seed = fresh_seed();
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

// Runs every instance; the exit code of each (-1: not started). Throughput: all at once, each one's
// output to the console directory; time to solution: one after another.
std::vector<int> run_all(const RunOptions& each, const CampaignOptions& c, const ResultsTree& tree,
                         const std::string& benchmark, const std::vector<uint64_t>& seeds) {
  const int runs = static_cast<int>(seeds.size());
  std::vector<int> exit_codes(seeds.size(), -1);
  const auto command = [&](int i) { return run_command(each, c, seeds[i], tree.results, fmt::format("result_{}.txt", i)); };
  if (c.weak) {
    std::vector<pid_t> pids;
    for (int i = 0; i < runs; ++i) pids.push_back(launch(command(i), tree.console / fmt::format("run_{}.log", i)));
    std::fprintf(stderr, "started %d %s instances (output in %s)\n", runs, benchmark.c_str(), tree.console.c_str());
    for (int i = 0; i < runs; ++i) exit_codes[i] = wait_for(pids[i]);
    return exit_codes;
  }
  for (int i = 0; i < runs && !g_stop; ++i) {
    std::fprintf(stderr, "=== run %d/%d, seed %llu ===\n", i + 1, runs, static_cast<unsigned long long>(seeds[i]));
    exit_codes[i] = wait_for(launch(command(i), {}));
    if (exit_codes[i] == 2) break;  // a configuration error: every run would fail the same way
  }
  return exit_codes;
}

// The campaign as a Slurm job array: task i is run i (seed i, result_<i>.txt), started by the
// launcher (kSrunLaunch, as tools/slurm/mlperf.sbatch launches, unless --launcher) inside the task's
// allocation, which sbatch's own options size (-N, --ntasks-per-node, ...). Each task then writes the system description from its log, so that
// the tree is whole whichever task ends first. Paths stay as given: the script runs from `cwd`. Every
// value goes through ShellScript, which quotes it (a comment's too) and refuses control characters.
void write_slurm_array(const fs::path& file, const RunOptions& each, const CampaignOptions& c, const ResultsTree& tree,
                       const std::string& benchmark, const std::vector<uint64_t>& seeds, const std::string& org,
                       const std::string& system) {
  using W = ShellScript;
  const std::string log_mark = "\x01";  // the log name: task i's, filled in by bash
  std::vector<W::Word> command;
  if (c.launcher.empty()) command.push_back(W::own(kSrunLaunch));  // bash text: MLPERF_SRUN_ARGS expands
  const std::vector<std::string> words = run_command(each, c, 0, tree.results, log_mark);
  for (size_t k = 0; k < words.size(); ++k) {
    const bool seed = k > 0 && words[k - 1] == "--seed";
    command.push_back(seed ? W::own("\"${seeds[$i]}\"") : words[k] == log_mark ? W::own("\"result_$i.txt\"") : W::value(words[k]));
  }
  const std::string log = shell_word(tree.results.string()) + "/\"result_$i.txt\"";
  std::vector<W::Word> describe = {W::value(c.executable.string()), W::value("--describe-system"), W::own(log),
                                   W::value("--org"), W::value(org), W::value("--system"), W::value(system),
                                   W::value("--output"), W::value(tree.org_dir.parent_path().string())};
  if (!c.system_info.empty()) describe.insert(describe.end(), {W::value("--system-info"), W::value(c.system_info.string())});
  std::string seed_list;
  for (uint64_t seed : seeds) {  // not `"sep" + std::to_string(...)`: g++ 12 for aarch64 sees a bogus -Wrestrict there
    if (!seed_list.empty()) seed_list += ' ';
    seed_list += std::to_string(seed);
  }
  const size_t runs = seeds.size();
  ShellScript script;
  script.comment(fmt::format("An MLPerf HPC {} submission of {} runs as a Slurm job array, written by", benchmark, runs))
      .comment(fmt::format("mlperf-run {} --runs {} --slurm. Submit it once, sized for one run:", c.version, runs))
      .comment("  sbatch [-N NODES --ntasks-per-node TASKS ...] " + shell_word(file.string()))
      .comment(fmt::format("Array task i is run i (its seed below), writing {};",
                           shell_word((tree.results / "result_<i>.txt").string())))
      .comment("then the system description " + shell_word(tree.system_json().string()) + " from its log.")
      .directive("SBATCH", "--job-name", "mlperf-" + benchmark)
      .directive("SBATCH", "--array", fmt::format("0-{}", runs - 1))
      .directive("SBATCH", "--output", (file.parent_path() / "logs" / (file.stem().string() + "-%A_%a.out")).string())
      .code("set -u")
      .command({W::value("cd"), W::value(fs::current_path().string()), W::own("|| exit 2")})
      .code("seeds=(" + seed_list + ")")
      .code("i=${SLURM_ARRAY_TASK_ID:?run this script with sbatch: it is a job array}")
      .code(fmt::format("echo \"run $i of {}, seed ${{seeds[$i]}}, job ${{SLURM_JOB_ID:-?}} on ${{SLURM_JOB_NODELIST:-?}}\"", runs))
      .command(command)
      .code("status=$?");
  describe.insert(describe.begin(), {W::own("[ -f " + log + " ] &&")});
  script.command(describe).code("exit $status");
  fs::create_directories(file.parent_path() / "logs");
  script.write(file);
}

}  // namespace

fs::path slurm_array_path(const fs::path& output, const std::string& system, const std::string& benchmark) {
  return output / "slurm" / (system + "-" + benchmark + ".sbatch");
}

int run_campaign(const RunOptions& run, const CampaignOptions& c) {
  BenchmarkFacts benchmark;
  std::string org, system;
  SystemFields system_info;
  try {  // everything that can be wrong with the command line, before the first run
    benchmark = benchmark_facts(load_workload(run, "--runs"));
    org = c.org.empty() ? configured(run, "org") : c.org;
    system = c.system.empty() ? configured(run, "platform") : c.system;
    if (!c.system_info.empty()) system_info = read_system_info(c.system_info);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlperf-run: error: %s\n", e.what());
    return 2;
  }
  const int required = benchmark.submission_runs;
  if (c.runs == 0 && required == 0) {
    std::fprintf(stderr, "mlperf-run: error: --runs 0: the %s workload does not say how many runs a submission needs; "
                 "give --runs N\n", benchmark.name.c_str());
    return 2;
  }
  const int runs = c.runs > 0 ? c.runs : required;
  if (c.slurm && c.weak) {
    std::fprintf(stderr, "mlperf-run: error: --weak --slurm: a throughput campaign runs its instances at once, which "
                 "a job array does not promise; run it inside one allocation with --launcher instead\n");
    return 2;
  }
  if (org.empty()) org = "mlperf-hpc";
  if (system.empty()) system = host_name();
  const ResultsTree tree(run.output_dir, org, system, benchmark.name, c.weak);
  if (tree.holds_results()) {
    std::fprintf(stderr, "mlperf-run: error: %s already holds result files: give another --output or --system\n",
                 tree.results.c_str());
    return 2;
  }
  if (runs < required)
    std::fprintf(stderr, "note: %d runs; a %s %s submission needs %s %d\n", runs, benchmark.name.c_str(),
                 c.weak ? "throughput" : "time-to-solution", c.weak ? "at least" : "exactly", required);

  RunOptions each = run;  // the tree's names go into every log
  each.sets.push_back("mlperf.org=" + org);
  each.sets.push_back("mlperf.platform=" + system);
  std::vector<int> exit_codes;
  try {
    fs::create_directories(tree.results);
    fs::create_directories(tree.systems);
    write_code_reference(tree.implementation, c.version,
                         run_command(each, c, run.seed.value_or(0), "<results dir>", "result_0.txt"), runs,
                         run.config_file);
    if (c.slurm) {
      const fs::path file = slurm_array_path(fs::absolute(run.output_dir), system, benchmark.name);
      write_slurm_array(file, each, c, tree, benchmark.name, campaign_seeds(run, runs), org, system);
      std::fprintf(stderr, "wrote %s: %d runs as a Slurm job array; submit them with\n  sbatch [options for one run] %s\n"
                   "each writes %s/result_<i>.txt; then mlperf-score score %s\n",
                   file.c_str(), runs, file.c_str(), tree.results.c_str(), tree.org_dir.c_str());
      return 0;
    }
    if (c.weak) fs::create_directories(tree.console);
    std::signal(SIGINT, on_stop);  // the runs see Ctrl-C too and log "aborted"; we start no more
    std::signal(SIGTERM, on_stop);
    exit_codes = run_all(each, c, tree, benchmark.name, campaign_seeds(run, runs));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlperf-run: error: %s\n", e.what());
    return 2;
  }

  int converged = 0, first_log = -1;
  for (int i = 0; i < runs; ++i) {
    converged += exit_codes[i] == 0;
    if (first_log < 0 && fs::exists(tree.result(i))) first_log = i;
  }
  if (first_log >= 0) {
    try {
      write_system_json(tree.system_json(), tree.result(first_log), org, system, c.version, system_info);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlperf-run: error: writing the system description: %s\n", e.what());
      return 2;
    }
  }
  std::fprintf(stderr, "%d of %d runs converged; submission tree: %s\n", converged, runs, tree.org_dir.c_str());
  if (first_log >= 0) std::fprintf(stderr, "score and check it: mlperf-score score %s; mlperf-score check %s\n",
                                   tree.org_dir.c_str(), tree.org_dir.c_str());
  if (std::find(exit_codes.begin(), exit_codes.end(), 2) != exit_codes.end()) return 2;
  return converged == runs ? 0 : 1;
}

}  // namespace mlph::core
