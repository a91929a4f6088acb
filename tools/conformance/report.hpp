// The conformance table: printed for people, optionally written as Markdown.
#pragma once

#include <string>
#include <vector>

#include "check.hpp"

namespace mlph::conformance {

struct Report {
  std::vector<std::string> header;  // what was compared, and how errors and tolerances are defined
  std::vector<Row> rows;
  std::vector<std::string> notes;   // checks that were skipped, and why
  std::string rerun;  // this command less its choice of checks: with a row's Row::rerun, the row alone
};

std::string text_table(const Report& report);
std::string markdown_table(const Report& report);
// "N checks: P PASS, F FAIL, U NOT IMPLEMENTED in T s: CONFORMS" (or DOES NOT CONFORM), then the
// checks not implemented, if any.
std::string summary(const Report& report, double seconds);
// No row failed and at least one passed: a backend that implements a subset of the catalogue
// conforms for what it implements, and refuses the rest at compile (NOT IMPLEMENTED rows).
bool conforms(const Report& report);
// For each failed row, one line: the command that runs that row alone (as benchdnn prints its
// problem line), "rerun: mlperf-conformance --backend x ... --ops conv --case 3".
std::string reruns(const Report& report);
// --verbose: every compared tensor's error and bound, one line each, for each row that failed or
// whose bounds were raised by measured noise (whole models).
std::string failed_tensors(const Report& report);

}  // namespace mlph::conformance
