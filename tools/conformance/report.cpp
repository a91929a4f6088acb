#include "report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>

namespace mlph::conformance {
namespace {

std::string error_text(const std::optional<double>& e) {
  if (!e) return "-";
  return *e == 0 ? "0" : fmt::format("{:.1e}", *e);
}

std::string verdict_text(const Row& row) {
  switch (row.verdict) {
    case Verdict::pass: return "PASS";
    case Verdict::fail: return "FAIL (" + row.reason + ")";
    case Verdict::not_implemented: return "NOT IMPLEMENTED (" + row.reason + ")";
  }
  return "";
}

constexpr size_t kColumns = 7;
using Cells = std::array<std::string, kColumns>;
const Cells kTitles = {"op", "case", "fwd err", "grad err", "update err", "tolerance", "result"};

// What raised some tensor's bound above the row's tolerance ("" none): 10x its measured noise (whole
// models, models.cpp), or an update's fp32 rounding (check.hpp, Observed::update_floors).
std::string raised_by(const Row& row) {
  std::string reasons;
  for (const TensorError& t : row.tensors)
    if (!t.raised_by.empty() && reasons.find(t.raised_by) == std::string::npos)
      reasons += (reasons.empty() ? "" : ", ") + t.raised_by;
  return reasons;
}
bool bound_raised(const Row& row) { return !raised_by(row).empty(); }

Cells cells(const Row& row) {
  return {row.op,
          row.description,
          error_text(row.forward),
          error_text(row.gradient),
          error_text(row.update),
          row.tolerance > 0 ? fmt::format("{:.0e}{}{}", row.tolerance,
                                          row.update_tolerance ? fmt::format(", update {:.0e}", *row.update_tolerance) : "",
                                          bound_raised(row) ? " or " + raised_by(row) : "")
                            : "-",
          verdict_text(row)};
}

// "conv, l2 (3 of 6 cases), cosmoflow": each check with NOT IMPLEMENTED rows, in table order.
std::string not_implemented_checks(const Report& report) {
  struct Tally {
    std::string check;
    int refused = 0, cases = 0;
  };
  std::vector<Tally> tallies;
  for (const Row& row : report.rows) {
    auto t = std::find_if(tallies.begin(), tallies.end(), [&](const Tally& t) { return t.check == row.op; });
    if (t == tallies.end()) t = tallies.insert(tallies.end(), Tally{row.op});
    ++t->cases;
    t->refused += row.verdict == Verdict::not_implemented ? 1 : 0;
  }
  std::vector<std::string> parts;
  for (const Tally& t : tallies)
    if (t.refused > 0)
      parts.push_back(t.refused == t.cases ? t.check : fmt::format("{} ({} of {} cases)", t.check, t.refused, t.cases));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

std::string text_table(const Report& report) {
  std::vector<Cells> lines = {kTitles};
  for (const Row& row : report.rows) lines.push_back(cells(row));
  std::array<size_t, kColumns> width{};
  for (const Cells& line : lines)
    for (size_t c = 0; c < kColumns; ++c) width[c] = std::max(width[c], line[c].size());
  std::string out;
  for (const std::string& h : report.header) out += h + "\n";
  for (const Cells& line : lines) {
    std::string text;
    for (size_t c = 0; c < kColumns; ++c)
      text += c + 1 == kColumns ? line[c] : fmt::format("{:<{}}  ", line[c], width[c]);
    out += text + "\n";
  }
  for (const std::string& note : report.notes) out += note + "\n";
  return out;
}

std::string markdown_table(const Report& report) {
  std::string out;
  for (const std::string& h : report.header) out += h + "  \n";
  out += "\n| " + fmt::format("{}", fmt::join(kTitles, " | ")) + " |\n|";
  for (size_t c = 0; c < kColumns; ++c) out += c >= 2 && c <= 5 ? "---:|" : "---|";
  out += "\n";
  for (const Row& row : report.rows) {
    Cells line = cells(row);
    for (std::string& cell : line)  // a pipe in an error message would split the cell
      for (size_t at = cell.find('|'); at != std::string::npos; at = cell.find('|', at + 2)) cell.replace(at, 1, "\\|");
    out += "| " + fmt::format("{}", fmt::join(line, " | ")) + " |\n";
  }
  if (!report.notes.empty()) out += "\n";
  for (const std::string& note : report.notes) out += note + "  \n";
  return out;
}

bool conforms(const Report& report) {
  const auto has = [&](Verdict v) {
    return std::any_of(report.rows.begin(), report.rows.end(), [&](const Row& r) { return r.verdict == v; });
  };
  return !has(Verdict::fail) && has(Verdict::pass);
}

std::string failed_tensors(const Report& report) {
  std::string out;
  for (const Row& row : report.rows) {
    if ((row.verdict != Verdict::fail && !bound_raised(row)) || row.tensors.empty()) continue;
    out += fmt::format("{} {}: every tensor's error and what it may be\n", row.op, row.description);
    for (const TensorError& t : row.tensors)
      out += fmt::format("  {:<8} {:<8} {:<10} {}{}\n", error_text(t.error), error_text(t.allowed), t.kind, t.name,
                         t.error <= t.allowed ? "" : "  <- over");
  }
  return out;
}

std::string reruns(const Report& report) {
  std::string out;
  for (const Row& row : report.rows)
    if (row.verdict == Verdict::fail) out += "rerun: " + report.rerun + " " + row.rerun + "\n";
  return out;
}

std::string summary(const Report& report, double seconds) {
  size_t count[3] = {0, 0, 0};
  for (const Row& row : report.rows) ++count[static_cast<int>(row.verdict)];
  std::string out = fmt::format("{} checks: {} PASS, {} FAIL, {} NOT IMPLEMENTED in {:.1f} s: {}", report.rows.size(),
                                count[0], count[1], count[2], seconds, conforms(report) ? "CONFORMS" : "DOES NOT CONFORM");
  if (count[2] > 0) out += "\nnot implemented: " + not_implemented_checks(report);
  return out;
}

}  // namespace mlph::conformance
