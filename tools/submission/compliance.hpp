// The project's own MLPerf HPC compliance rules: the required keys, their order and values, per
// ruleset (hpc 1.0.0, 2.0.0, 3.0.0), as the official checker's YAML rule files state them for
// CosmoFlow and DeepCAM. Same structure: common rules, then the division's, then the benchmark's;
// each rule file keeps its own state; a later file's rule for a key replaces an earlier verdict.
#pragma once

#include <string>
#include <vector>

#include "mlph/core/mllog_reader.hpp"

namespace mlph::submission {

struct Verdict {
  bool valid = true;
  std::vector<std::string> errors;    // "file:line: key: what failed [hpc_3.0.0/rule_file.yaml]"
  std::vector<std::string> warnings;  // e.g. an EXACTLY_ONE key repeated with the same value
};

const std::vector<std::string>& rulesets();  // "1.0.0", "2.0.0", "3.0.0"

// Checks one parsed log; unreadable lines count as errors, as in the official parser.
Verdict check_log(const core::ParsedLog& log, const std::string& ruleset);

}  // namespace mlph::submission
