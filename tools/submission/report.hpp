// The official MLCommons tools, run beside the project's own rules when they are importable, and
// the report: per-run CSVs, a Markdown summary and (with matplotlib) PNG plots.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace mlph::submission {

struct OfficialTools {
  bool available = false;
  std::string why;            // when not available
  std::string python;         // interpreter
  std::string pythonpath;     // extra PYTHONPATH entry ("" if importable as it is)
};

struct OfficialResult {
  bool passed = false;
  std::vector<std::string> findings;  // its ERROR lines and its final verdict
  std::string output;
};

// Python: $MLPH_PYTHON, else /usr/bin/python3, else python3. `package_dir` (optional) holds mlperf_logging/.
OfficialTools find_official_tools(const std::string& package_dir);
OfficialResult run_package_checker(const OfficialTools& tools, const std::filesystem::path& org_dir,
                                   const std::string& ruleset, bool rcp_bypass);
OfficialResult run_compliance_checker(const OfficialTools& tools, const std::filesystem::path& log,
                                      const std::string& ruleset);
// The summarizer's CSV for `org_dir` (its stdout in `output`); passed when it wrote the CSV.
OfficialResult run_result_summarizer(const OfficialTools& tools, const std::filesystem::path& org_dir,
                                     const std::string& ruleset, const std::filesystem::path& csv);

// runs.csv, epochs.csv, summary.md in `out`, then plot_report.py for the PNGs. Returns the exit code.
int write_report(const std::vector<std::string>& paths, const std::filesystem::path& out, const std::string& ruleset);

}  // namespace mlph::submission
