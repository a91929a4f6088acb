// mlperf-run: the command-line front of the core runner.
#include <fmt/format.h>

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "mlph/core/borrow.hpp"
#include "mlph/core/campaign.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/core/results_tree.hpp"
#include "mlph/core/runner.hpp"
#include "mlph/sdk/util/numbers.hpp"

namespace po = boost::program_options;
using namespace mlph::core;

namespace {

int list_plugins(const std::vector<std::filesystem::path>& dirs) {
  PluginLoader loader(default_search_path(dirs));
  std::printf("%-9s %-12s %-8s %-5s %s\n", "KIND", "NAME", "VERSION", "ABI", "FILE");
  for (const ScanEntry& e : loader.scan()) {
    if (e.ok)
      std::printf("%-9s %-12s %-8s %u.%-3u %s\n", kind_name(e.kind), e.name.c_str(), e.version.c_str(), e.abi_major,
                  e.abi_minor, e.file.c_str());
    else
      std::printf("%-9s %-12s %-8s %-5s %s\n  ignored: %s\n", kind_name(e.kind), e.name.c_str(), "-", "-",
                  e.file.c_str(), e.error.c_str());
  }
  std::printf("search path:");
  for (const auto& dir : loader.search_path()) std::printf(" %s", dir.lexically_normal().c_str());
  std::printf("\n");
  return 0;
}

// Where --output points must be a directory, or not exist yet with a directory as its nearest
// existing ancestor: the log (or the submission tree) goes there. Empty when it can.
std::string output_problem(const std::filesystem::path& output) {
  std::error_code error;
  for (std::filesystem::path p = output; !p.empty(); p = p.parent_path()) {
    const std::filesystem::file_status status = std::filesystem::status(p, error);
    if (std::filesystem::exists(status))
      return std::filesystem::is_directory(status) ? ""
             : p == output ? fmt::format("--output {}: is not a directory", output.string())
                           : fmt::format("--output {}: {} is not a directory", output.string(), p.string());
    if (p == p.parent_path()) break;
  }
  return "";
}

// --describe-system: the system description of a campaign's tree, from one of its logs. Written aside
// and renamed into place: the tasks of a job array may write it at the same time.
int describe_system(const std::string& log, const std::filesystem::path& output, const CampaignOptions& campaign,
                    const std::string& system_info) {
  if (campaign.org.empty() || campaign.system.empty()) {
    std::fprintf(stderr, "mlperf-run: error: --describe-system needs --org and --system (the tree's names)\n");
    return 2;
  }
  try {
    const SystemFields fields = system_info.empty() ? SystemFields{} : read_system_info(system_info);
    const ResultsTree tree(output, campaign.org, campaign.system, "", false);
    std::filesystem::create_directories(tree.systems);
    const std::filesystem::path aside = tree.system_json().string() + fmt::format(".{}.tmp", getpid());
    write_system_json(aside, log, campaign.org, campaign.system, MLPH_VERSION, fields);
    std::filesystem::rename(aside, tree.system_json());
    std::fprintf(stderr, "wrote %s\n", tree.system_json().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlperf-run: error: --describe-system %s: %s\n", log.c_str(), e.what());
    return 2;
  }
}

int main_checked(int argc, char** argv);

}  // namespace

// Every error is one line: what the paths below do not catch themselves ends here.
int main(int argc, char** argv) {
  try {
    return main_checked(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlperf-run: error: %s\n", e.what());
    return 2;
  }
}

namespace {

int main_checked(int argc, char** argv) {
  RunOptions options;
  CampaignOptions campaign;
  std::vector<std::string> plugin_dirs;
  std::string borrow, system_info, checkpoint_dir, resume, export_weights, describe_log, status_file;
  // Unsigned numbers are read as text: program_options would take -1 as 4294967295.
  std::string seed, checkpoint_every = "1", checkpoint_keep = "2";
  po::options_description cli(
      "mlperf-run: train an MLPerf HPC benchmark to its quality target with run-time plug-ins\n\n"
      "usage: mlperf-run --workload NAME [--backend NAME] [--config FILE] [--set key=value]... [options]\n\n"
      "options");
  cli.add_options()
      ("help,h", "show this help")
      ("version", "print the version and plug-in ABI")
      ("list-plugins", "list the plug-ins found on the search path, with kind, name, version, ABI and file")
      ("workload,w", po::value(&options.workload), "workload plug-in (see --list-plugins); or `workload:` in the config")
      ("backend,b", po::value(&options.backend), "compute backend plug-in (default: reference)")
      ("comms", po::value(&options.comms), "comms plug-in (default: local)")
      ("storage", po::value(&options.storage), "storage plug-in (default: posix)")
      ("config,c", po::value(&options.config_file), "YAML config, layered over the workload's defaults")
      ("set,s", po::value(&options.sets)->composing(), "override one config key: key=value (repeatable)")
      ("data,d", po::value(&options.data_dir), "dataset directory (same as --set data.dir=DIR)")
      ("output,o", po::value<std::string>()->default_value("out"), "directory for the MLPerf log (result_0.txt)")
      ("seed", po::value(&seed), "seed for weights and data order (default: a fresh one per run)")
      ("division", po::value(&options.division), "closed (default) or open; closed enforces the tunable rules")
      ("plugin-dir", po::value(&plugin_dirs)->composing(), "search this directory for plug-ins first (repeatable)")
      ("generate-data", po::value(&options.generate_data_dir), "write the workload's synthetic dataset to DIR and exit")
      ("log-name", po::value(&options.log_name), "file name of the MLPerf log in --output (default result_0.txt)")
      ("checkpoint-dir", po::value(&checkpoint_dir),
       "save a checkpoint into DIR after every epoch (weights, optimizer state, counters), and where SIGUSR1, SIGTERM "
       "or SIGINT stops the run (exit status 3); go on with --resume DIR, or --resume auto")
      ("checkpoint-every", po::value(&checkpoint_every), "with --checkpoint-dir: epochs between checkpoints (default 1)")
      ("checkpoint-keep", po::value(&checkpoint_keep), "with --checkpoint-dir: checkpoints kept, the newest (default 2)")
      ("resume", po::value(&resume),
       "go on from a checkpoint (DIR/epoch-NNNNNN[-step-NNNNNN], or DIR: its latest) where it stopped; `auto`: from "
       "--checkpoint-dir's latest if it holds one, else start afresh (a requeued job); a resumed run is not a timed "
       "MLPerf result")
      ("status-file", po::value(&status_file),
       "rank 0 writes the status it exits with (0-3, as below) to FILE when the run ends: what a job script reads, "
       "for a launcher's own status may not be the run's (tools/slurm/mlperf.sbatch)")
      ("switch-backend",
       "with --resume: go on from another backend's checkpoint on this run's backend (weights and optimizer state "
       "are saved in fp32, as every backend reads them): training continues, not bitwise")
      ("export-weights", po::value(&export_weights),
       "at the end, write the trained weights to FILE (.npz) in the reference implementation's PyTorch names and layouts")
      ("borrow-hparams", po::value(&borrow),
       "take the hyperparameters of another submission's result log, or of a YAML of log keys; checked against "
       "the closed rules, overridden by --set")
      ("runs", po::value(&campaign.runs),
       "a submission: N runs with distinct seeds into the MLCommons tree under --output "
       "(0: the count the benchmark's rules require, as its workload says)")
      ("weak", "with --runs: throughput (weak scaling), all N model instances at once, each with its own log")
      ("org", po::value(&campaign.org), "submitting organization (same as --set mlperf.org=ORG)")
      ("system", po::value(&campaign.system), "system name (same as --set mlperf.platform=NAME; default: the host name)")
      ("system-info", po::value(&system_info), "with --runs: YAML of system-description fields to fill or override")
      ("launcher", po::value(&campaign.launcher), "with --runs: command prefix of every run, e.g. \"mpirun -n 4\"")
      ("slurm", "with --runs: write the campaign as a Slurm job array (<output>/slurm/<system>-<benchmark>.sbatch, "
                "one task per run, launched by srun unless --launcher) for one sbatch, instead of running it")
      ("describe-system", po::value(&describe_log),
       "write <output>/<org>/systems/<system>.json (--org, --system, --system-info) from the result log LOG and this "
       "machine, and exit: what each task of a --slurm job array does after its run");
  po::variables_map vm;
  try {
    // No guessed abbreviations (--checkpoint-d): a job script that looks for an option by its name
    // (tools/slurm/mlperf.sbatch) must see what mlperf-run sees.
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(argc, argv).options(cli).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "mlperf-run: error: %s (see --help)\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << cli << "\n";
    return 0;
  }
  if (vm.count("version")) {
    std::printf("mlperf-run %s, plug-in ABI %d.%d\n", MLPH_VERSION, MLPH_ABI_MAJOR, MLPH_ABI_MINOR);
    return 0;
  }
  for (const auto& d : plugin_dirs) options.plugin_dirs.emplace_back(d);
  if (vm.count("list-plugins")) return list_plugins(options.plugin_dirs);
  if (vm.count("describe-system"))
    return describe_system(describe_log, vm["output"].as<std::string>(), campaign, system_info);
  try {
    if (vm.count("seed")) options.seed = mlph::sdk::parse_integer<uint64_t>(seed, "--seed");
    options.checkpoint_every = mlph::sdk::parse_integer<uint32_t>(checkpoint_every, "--checkpoint-every", 1);
    options.checkpoint_keep = mlph::sdk::parse_integer<uint32_t>(checkpoint_keep, "--checkpoint-keep", 1);
  } catch (const mlph::sdk::Error& e) {
    std::fprintf(stderr, "mlperf-run: error: %s\n", e.what());
    return 2;
  }
  options.output_dir = vm["output"].as<std::string>();
  options.checkpoint_dir = checkpoint_dir, options.export_weights = export_weights, options.status_file = status_file;
  options.resume_auto = resume == "auto";  // a checkpoint directory named auto: --resume ./auto
  if (!options.resume_auto) options.resume_from = resume;
  options.switch_backend = vm.count("switch-backend") > 0;
  if (options.switch_backend && resume.empty()) {
    std::fprintf(stderr, "mlperf-run: error: --switch-backend goes with --resume (the checkpoint to go on from)\n");
    return 2;
  }
  if (vm.count("runs") && !(checkpoint_dir.empty() && resume.empty() && export_weights.empty())) {
    std::fprintf(stderr, "mlperf-run: error: --runs makes timed submission runs: no --checkpoint-dir, --resume or "
                         "--export-weights with it\n");
    return 2;
  }
  if (const std::string problem = output_problem(options.output_dir); !problem.empty()) {
    std::fprintf(stderr, "mlperf-run: error: %s\n", problem.c_str());
    return 2;
  }
  if (vm.count("log-name") && (options.log_name.empty() || options.log_name.find('/') != std::string::npos ||
                               options.log_name == "." || options.log_name == "..")) {
    std::fprintf(stderr, "mlperf-run: error: --log-name '%s': a file name in --output, without a directory\n",
                 options.log_name.c_str());
    return 2;
  }
  if (vm.count("slurm") && !vm.count("runs")) {
    std::fprintf(stderr, "mlperf-run: error: --slurm goes with --runs: it writes a campaign as a job array\n");
    return 2;
  }
  if (vm.count("runs")) {
    if (campaign.runs < 0 || campaign.runs > kMaxRuns) {
      std::fprintf(stderr, "mlperf-run: error: --runs %d: from 0 to %d (a submission needs 10 runs, or some hundreds of "
                   "instances; Slurm's default MaxArraySize is 1001)\n", campaign.runs, kMaxRuns);
      return 2;
    }
    campaign.weak = vm.count("weak") > 0;
    campaign.slurm = vm.count("slurm") > 0;
    campaign.system_info = system_info;
    campaign.borrow_hparams = borrow;  // each run borrows for itself: it knows its rank count
    campaign.executable = "/proc/self/exe";
    campaign.version = MLPH_VERSION;
    try {
      if (!borrow.empty()) borrow_hparams(borrow, options);  // fail before the first run
      campaign.executable = std::filesystem::read_symlink("/proc/self/exe");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlperf-run: error: %s\n", e.what());
      return 2;
    }
    return run_campaign(options, campaign);
  }
  if (!campaign.org.empty()) options.sets.push_back("mlperf.org=" + campaign.org);
  if (!campaign.system.empty()) options.sets.push_back("mlperf.platform=" + campaign.system);
  if (!borrow.empty()) {
    try {
      std::vector<std::string> sets = borrow_hparams(borrow, options);
      sets.insert(sets.end(), options.sets.begin(), options.sets.end());  // the user's --set win
      options.sets = std::move(sets);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlperf-run: error: %s\n", e.what());
      return 2;
    }
  }
  return run(options);
}

}  // namespace
