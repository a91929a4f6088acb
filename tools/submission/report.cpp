#include "report.hpp"

#include <fmt/format.h>
#include <sys/wait.h>

#include <array>
#include <boost/dll/runtime_symbol_info.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "mlph/core/atomic_file.hpp"

#include "scoring.hpp"

namespace mlph::submission {
namespace fs = std::filesystem;
namespace {

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `command` through the shell; returns exit code and merged output.
std::pair<int, std::string> shell(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, "cannot run: " + command};
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe)) output += buffer.data();
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// A directory of its own under TMPDIR, removed with all it holds.
class ScratchDir {
 public:
  ScratchDir() {
    std::string path = (fs::temp_directory_path() / "mlperf-score.XXXXXX").string();
    if (!::mkdtemp(path.data())) throw std::runtime_error(fmt::format("{}: cannot create it: {}", path, std::strerror(errno)));
    path_ = path;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs Python with `args` (an official tool): exit code and merged output. The checkers write their
// log files into the working directory: they get a scratch one, which goes when they are done.
std::pair<int, std::string> run_python(const OfficialTools& t, const std::string& args) {
  const ScratchDir scratch;
  const std::string env = t.pythonpath.empty() ? "" : "PYTHONPATH=" + quoted(t.pythonpath) + "${PYTHONPATH:+:$PYTHONPATH} ";
  return shell(fmt::format("cd {} && {}{} {}", quoted(scratch.path().string()), env, quoted(t.python), args));
}

std::vector<std::string> lines_starting(const std::string& text, std::initializer_list<const char*> prefixes) {
  std::vector<std::string> found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    for (const char* p : prefixes)
      if (line.rfind(p, 0) == 0) {
        found.push_back(line);
        break;
      }
  return found;
}

std::string python_interpreter() {
  if (const char* p = std::getenv("MLPH_PYTHON"); p && *p) return p;
  return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

}  // namespace

OfficialTools find_official_tools(const std::string& package_dir) {
  OfficialTools t;
  t.python = python_interpreter();
  t.pythonpath = package_dir.empty() ? "" : fs::absolute(package_dir).string();
  const auto [code, output] = run_python(t, "-c 'import mlperf_logging.package_checker, mlperf_logging.result_summarizer'");
  t.available = code == 0;
  if (!t.available)
    t.why = fmt::format("{} cannot import mlperf_logging{}; give --mlperf-logging DIR", t.python,
                        package_dir.empty() ? "" : " from " + package_dir);
  return t;
}

OfficialResult run_package_checker(const OfficialTools& t, const fs::path& org_dir, const std::string& ruleset,
                                   bool rcp_bypass) {
  OfficialResult r;
  const auto [code, output] =
      run_python(t, fmt::format("-m mlperf_logging.package_checker {} hpc {}{}", quoted(fs::absolute(org_dir).string()),
                                ruleset, rcp_bypass ? " --rcp-bypass" : ""));
  r.output = output;
  r.passed = code == 0 && output.find("FOUND NO ERRORS") != std::string::npos;
  r.findings = lines_starting(output, {"ERROR", "PACKAGE CHECKER", "Traceback", "AssertionError"});
  return r;
}

OfficialResult run_compliance_checker(const OfficialTools& t, const fs::path& log, const std::string& ruleset) {
  OfficialResult r;
  const auto [code, output] = run_python(t, fmt::format("-m mlperf_logging.compliance_checker --usage hpc --ruleset {} {}",
                                                         ruleset, quoted(fs::absolute(log).string())));
  r.output = output;
  r.passed = code == 0 && output.find("SUCCESS") != std::string::npos;
  r.findings = lines_starting(output, {"ERROR", "WARNING - ", "CHECK for", "Required", "Failed"});
  return r;
}

OfficialResult run_result_summarizer(const OfficialTools& t, const fs::path& org_dir, const std::string& ruleset,
                                     const fs::path& csv) {
  OfficialResult r;
  fs::remove(csv);
  const auto [code, output] =
      run_python(t, fmt::format("-m mlperf_logging.result_summarizer {} hpc {} --csv {}",
                                quoted(fs::absolute(org_dir).string()), ruleset, quoted(fs::absolute(csv).string())));
  r.output = output;
  r.passed = code == 0 && fs::exists(csv);
  return r;
}

int write_report(const std::vector<std::string>& paths, const fs::path& out, const std::string& ruleset) {
  std::vector<BenchmarkResult> results;
  for (const std::string& p : paths) {
    if (fs::is_directory(fs::path(p) / "results")) {
      for (const SystemResult& s : score_submission(p, ruleset).systems)
        results.insert(results.end(), s.benchmarks.begin(), s.benchmarks.end());
    } else {  // a benchmark directory: .../<system>/<strong|weak>/<benchmark>
      const fs::path dir = fs::absolute(p).lexically_normal();
      const std::string scaling = dir.parent_path().filename() == "weak" ? "weak" : "strong";
      const std::string name = dir.filename().string();
      results.push_back(score_directory(dir, scaling, name, ruleset, false, required_runs(name)));
    }
  }
  if (results.empty()) throw std::runtime_error("no result directories found");
  fs::create_directories(out);
  std::string runs = "set,system,scaling,benchmark,run,seed,compliant,status,global_batch_size,train_samples,"
                     "epochs_to_converge,time_to_train_min,init_s,staging_s,training_s,evaluation_s,other_s,"
                     "throughput_samples_per_s\n";
  std::string epochs = "set,run,epoch,metric_key,metric\n";
  std::string md = "# MLPerf HPC results\n\n"
                   "| system | scaling | benchmark | runs | GBS | score (min) | epochs to converge | verdict |\n"
                   "|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const BenchmarkResult& b = results[i];
    const std::string set = fmt::format("{}/{}/{}", b.system, b.scaling, b.benchmark);
    double epochs_sum = 0;
    int converged = 0;
    long long gbs = 0;
    for (const RunResult& r : b.runs) {
      const double timed = r.minutes * 60, other = std::max(0.0, timed - r.staging_s - r.train_s - r.eval_s);
      const int epochs_run = r.metric.empty() ? 0 : r.metric.back().epoch;
      const double throughput = r.train_s > 0 ? static_cast<double>(r.train_samples) * epochs_run / r.train_s : 0;
      runs += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{:.6f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f}\n", set,
                          b.system, b.scaling, b.benchmark, r.file.filename().string(), r.seed ? *r.seed : 0,
                          r.verdict.valid ? 1 : 0, r.status, r.global_batch_size, r.train_samples, r.epochs_to_converge,
                          r.minutes, r.init_s, r.staging_s, r.train_s, r.eval_s, other, throughput);
      for (const EpochPoint& e : r.metric)
        epochs += fmt::format("{},{},{},{},{}\n", set, r.file.filename().string(), e.epoch, r.metric_key, e.metric);
      if (r.epochs_to_converge > 0) epochs_sum += r.epochs_to_converge, ++converged;
      gbs = std::max(gbs, r.global_batch_size);
    }
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", b.system, b.scaling, b.benchmark, b.runs.size(),
                      gbs, b.score ? fmt::format("{:.4f}", *b.score) : "none",
                      converged ? fmt::format("{:.2f}", epochs_sum / converged) : "-",
                      b.errors.empty() ? "accepted" : "NOT ACCEPTED");
  }
  for (const BenchmarkResult& b : results)
    for (const std::string& e : b.errors) md += "\n- " + e;
  md += "\n\n## Plots\n\n"
        "![Time to solution per run: staging, training, evaluation, other](time_breakdown.png)\n\n"
        "![Epochs to converge and throughput against the global batch size](batch_size.png)\n\n"
        "![Quality metric per epoch, every run](metric_per_epoch.png)\n";
  core::write_whole_file(out / "runs.csv", runs);
  core::write_whole_file(out / "epochs.csv", epochs);
  core::write_whole_file(out / "summary.md", md);

  // share/mlperf-hpc/ beside the program's bin/: in the build tree as in an installation.
  const fs::path script =
      fs::path(boost::dll::program_location().parent_path().string()) / ".." / "share/mlperf-hpc/plot_report.py";
  const auto [code, output] = shell(fmt::format("{} {} {}", quoted(python_interpreter()), quoted(script.string()),
                                                quoted(fs::absolute(out).string())));
  std::fputs(output.c_str(), stdout);
  std::printf("report: %s (summary.md, runs.csv, epochs.csv%s)\n", out.c_str(), code == 0 ? ", PNG plots" : "");
  if (code == 3) std::printf("plots skipped: matplotlib is missing (Debian: apt install python3-matplotlib)\n");
  return code == 0 || code == 3 ? 0 : 1;
}

}  // namespace mlph::submission
