// mlperf-score: score, check and report an MLCommons HPC submission tree (as mlperf-run --runs
// writes it), the way the official result summarizer and package checker judge it.
//   mlperf-score score  ORG_DIR [--ruleset 3.0.0] [--csv FILE]
//   mlperf-score check  ORG_DIR|LOG... [--ruleset 3.0.0] [--mlperf-logging DIR] [--rcp-bypass]
//   mlperf-score report ORG_DIR|BENCHMARK_DIR... --out DIR [--ruleset 3.0.0]
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "mlph/core/atomic_file.hpp"
#include "report.hpp"
#include "scoring.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace mlph::submission;

namespace {

struct Options {
  std::string command, ruleset = "3.0.0", csv, mlperf_logging, out;
  std::vector<std::string> paths;
  bool rcp_bypass = false;
};

bool is_org_dir(const fs::path& p) { return fs::is_directory(p / "results") && fs::is_directory(p / "systems"); }

void print_benchmark(const BenchmarkResult& b, bool verbose) {
  std::printf("%s/%s/%s (%zu runs)\n", b.system.c_str(), b.scaling.c_str(), b.benchmark.c_str(), b.runs.size());
  for (const RunResult& r : b.runs) {
    if (verbose || !r.verdict.valid)
      std::printf("  %-14s %8.3f min  seed %-11s %s\n", r.file.filename().c_str(), r.minutes,
                  r.seed ? std::to_string(*r.seed).c_str() : "-", r.verdict.valid ? "compliant" : "NOT COMPLIANT");
    for (const std::string& e : r.verdict.errors) std::printf("    error: %s\n", e.c_str());
  }
  for (const std::string& n : b.notices) std::printf("  notice: %s\n", n.c_str());
  for (const std::string& e : b.errors) std::printf("  ERROR: %s\n", e.c_str());
}

int score(const Options& o) {
  if (o.paths.size() != 1) throw std::invalid_argument("score takes one submission directory (<org>)");
  const Submission sub = score_submission(o.paths[0], o.ruleset);
  bool rejected = false;
  for (const SystemResult& s : sub.systems) {
    for (const std::string& e : s.errors) std::printf("ERROR: %s\n", e.c_str()), rejected = true;
    for (const BenchmarkResult& b : s.benchmarks) {
      print_benchmark(b, true);
      rejected |= !b.errors.empty();
      if (b.scaling == "strong")
        std::printf("  time to solution: %s min (olympic mean)\n", b.score ? fmt::format("{:.4f}", *b.score).c_str() : "none");
      else
        std::printf("  throughput: %s min for %d models at instance scale %lld\n",
                    b.score ? fmt::format("{:.4f}", *b.score).c_str() : "none", b.models, b.instance_scale);
    }
  }
  std::printf("\n%s", summary_table(sub).c_str());
  const std::string csv = summary_csv(sub);
  if (!o.csv.empty()) {
    mlph::core::write_whole_file(o.csv, csv);
    std::printf("CSV (as the result summarizer writes it): %s\n", o.csv.c_str());
  }
  std::printf("%s\n", rejected ? "verdict: NOT ACCEPTED (see the errors above)" : "verdict: accepted");
  return rejected ? 1 : 0;
}

int check(const Options& o) {
  bool own_ok = true, official_ok = true;
  std::vector<std::string> logs, orgs;
  for (const std::string& p : o.paths) (is_org_dir(p) ? orgs : logs).push_back(p);
  for (const std::string& org : orgs) {
    const Submission sub = score_submission(org, o.ruleset);
    for (const SystemResult& s : sub.systems) {
      for (const std::string& e : s.errors) std::printf("ERROR: %s\n", e.c_str()), own_ok = false;
      for (const BenchmarkResult& b : s.benchmarks) {
        print_benchmark(b, false);
        own_ok &= b.errors.empty();
      }
    }
  }
  for (const std::string& log : logs) {
    const RunResult r = read_run(log, o.ruleset);
    std::printf("%s: %s\n", log.c_str(), r.verdict.valid ? "compliant" : "NOT COMPLIANT");
    for (const std::string& e : r.verdict.errors) std::printf("  error: %s\n", e.c_str());
    own_ok &= r.verdict.valid;
  }
  std::printf("project rules (hpc %s): %s\n", o.ruleset.c_str(), own_ok ? "PASS" : "FAIL");

  const OfficialTools tools = find_official_tools(o.mlperf_logging);
  if (!tools.available) {
    std::printf("official mlperf_logging: not run (%s)\n", tools.why.c_str());
    return own_ok ? 0 : 1;
  }
  for (const std::string& org : orgs) {
    const OfficialResult r = run_package_checker(tools, org, o.ruleset, o.rcp_bypass);
    for (const std::string& line : r.findings) std::printf("  official: %s\n", line.c_str());
    std::printf("official package checker on %s: %s\n", org.c_str(), r.passed ? "PASS" : "FAIL");
    official_ok &= r.passed;
  }
  for (const std::string& log : logs) {
    const OfficialResult r = run_compliance_checker(tools, log, o.ruleset);
    for (const std::string& line : r.findings) std::printf("  official: %s\n", line.c_str());
    std::printf("official compliance checker on %s: %s\n", log.c_str(), r.passed ? "PASS" : "FAIL");
    official_ok &= r.passed;
  }
  if (own_ok != official_ok)
    std::printf("note: the verdicts differ (the project does not run the RCP checker; see --rcp-bypass)\n");
  return own_ok && official_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  po::options_description cli(
      "mlperf-score: score, check and report an MLCommons HPC submission\n\n"
      "usage: mlperf-score score  ORG_DIR [--csv FILE]\n"
      "       mlperf-score check  ORG_DIR|LOG... [--mlperf-logging DIR] [--rcp-bypass]\n"
      "       mlperf-score report ORG_DIR|BENCHMARK_DIR... --out DIR\n\noptions");
  cli.add_options()("help,h", "show this help")
      ("ruleset", po::value(&o.ruleset), "hpc ruleset: 3.0.0 (default), 2.0.0 or 1.0.0")
      ("csv", po::value(&o.csv), "score: write the result summarizer's CSV here")
      ("mlperf-logging", po::value(&o.mlperf_logging),
       "check: directory holding the official mlperf_logging package (default: importable as it is)")
      ("rcp-bypass", "check: pass --rcp-bypass to the official package checker")
      ("out", po::value(&o.out), "report: output directory (plots, CSV, summary.md)")
      ("command", po::value(&o.command), "score, check or report")
      ("paths", po::value(&o.paths)->composing(), "directories or logs");
  po::positional_options_description positional;
  positional.add("command", 1).add("paths", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(cli).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "mlperf-score: error: %s (see --help)\n", e.what());
    return 2;
  }
  if (vm.count("help") || o.command.empty()) {
    std::cout << cli << "\n";
    return o.command.empty() && !vm.count("help") ? 2 : 0;
  }
  o.rcp_bypass = vm.count("rcp-bypass") > 0;
  try {
    if (std::find(rulesets().begin(), rulesets().end(), o.ruleset) == rulesets().end())
      throw std::invalid_argument("unknown --ruleset " + o.ruleset + " (3.0.0, 2.0.0 or 1.0.0)");
    if (o.paths.empty()) throw std::invalid_argument("give a submission directory or logs");
    for (const std::string& p : o.paths)
      if (!fs::exists(p)) throw std::invalid_argument(p + ": no such file or directory");
    if (o.command == "score") return score(o);
    if (o.command == "check") return check(o);
    if (o.command == "report") {
      if (o.out.empty()) throw std::invalid_argument("report needs --out DIR");
      return write_report(o.paths, o.out, o.ruleset);
    }
    throw std::invalid_argument("unknown command '" + o.command + "' (score, check or report)");
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "mlperf-score: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlperf-score: error: %s\n", e.what());
    return 1;
  }
}
