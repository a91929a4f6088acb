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
};

std::string text_table(const Report& report);
std::string markdown_table(const Report& report);
// "N checks: P PASS, F FAIL, U UNSUPPORTED in T s", then PASSED or FAILED.
std::string summary(const Report& report, double seconds);
bool all_passed(const Report& report);
// --verbose: every compared tensor's error and bound, one line each, for each row that failed or
// whose bounds were raised by measured noise (whole models).
std::string failed_tensors(const Report& report);

}  // namespace mlph::conformance
