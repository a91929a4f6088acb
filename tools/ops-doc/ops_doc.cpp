// mlperf-ops-doc: renders the op catalogue of mlph/sdk/graph/op_schema.hpp as the Markdown tables of
// docs/ops.md, between its `<!-- ops-doc: NAME begin -->` and `<!-- ops-doc: NAME end -->` markers
// (the prose around them is written by hand).
//   mlperf-ops-doc                      prints the tables
//   mlperf-ops-doc --write docs/ops.md  rewrites them in place
//   mlperf-ops-doc --check docs/ops.md  exit 1 when the file differs from the schema (a CTest test)
// Exit status 2: bad usage, or a file that cannot be read or lacks the markers.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "mlph/sdk/graph/op_schema.hpp"

namespace {

using namespace mlph::sdk::schema;

struct Failure {
  std::string message;
};

// A table cell: pipes would end it, inside code spans too.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string code(const std::string& text) { return "`" + text + "`"; }

std::string input_text(const Input& in) {
  std::string out = in.arity == Arity::optional ? "optional " : "";
  out += in.arity == Arity::variadic ? std::string(in.name) + "1.." + in.name + "n" : in.name;
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on " " + string here.
  const std::string shape = in.shape;
  if (!shape.empty()) out.append(shape.front() == '[' ? " `" : " (").append(shape).append(shape.front() == '[' ? "`" : ")");
  if (in.dtypes != kF32) out.append(" ").append(dtypes_text(in.dtypes));
  if (in.state) out += " (state)";
  return out;
}

// "one integer >= 1 per spatial dim", "number in [0, 1)", "one number per channel".
std::string value_text(const Attribute& a) {
  const bool integer = a.type == AttrType::integer || a.type == AttrType::integers;
  std::string range;  // "finite" goes without saying
  if (a.range.text() != "finite") range.append(" ").append(a.range.text());
  const std::string kind = integer ? "integer" : "number";
  switch (a.count) {
    case Count::one: return kind + range;
    case Count::spatial: return "one " + kind + range + " per spatial dim";
    case Count::spatial_or_twice: return "one or two " + kind + "s" + range + " per spatial dim";
    case Count::output_rank: return "one " + kind + range + " per output dim";
    case Count::channels: return "one " + kind + range + " per channel";
  }
  return kind;
}

std::string default_text(const Default& d) {
  switch (d.kind) {
    case Default::Kind::required: return "required";
    case Default::Kind::value: return "default " + number_text(d.value);
    case Default::Kind::attribute: return "default: " + code(d.attribute);
    case Default::Kind::output_shape: return "default: the output's shape";
  }
  return "";
}

std::string attributes_text(const std::vector<Attribute>& attrs) {
  if (attrs.empty()) return "—";
  std::string out;
  for (const Attribute& a : attrs) {
    if (!out.empty()) out += "; ";
    out += code(a.name) + ": " + value_text(a) + ", " + default_text(a.absent);
    if (*a.doc) out += " (" + std::string(a.doc) + ")";
    if (a.since > 1) out += " (op-set " + std::to_string(a.since) + ")";
  }
  return out;
}

std::string row(const std::vector<std::string>& cells) {
  std::string out = "|";
  for (const std::string& c : cells) out.append(" ").append(cell(c)).append(" |");
  return out + "\n";
}

std::string ops_table() {
  std::string out =
      "| op | inputs | output | attributes | gradient | precision | semantics |\n|---|---|---|---|---|---|---|\n";
  for (const Op& op : ops()) {
    std::string inputs;
    for (const Input& in : op.inputs) inputs += (inputs.empty() ? "" : ", ") + input_text(in);
    const std::string name = code(op.name) + (op.since > 1 ? " (op-set " + std::to_string(op.since) + ")" : "");
    out += row({name, inputs, op.output, attributes_text(op.attrs), op.gradient ? "yes" : "no",
                op.reduced_precision ? code("backend.precision") : "fp32", op.semantics});
  }
  return out;
}

std::string optimizers_table() {
  std::string out = "| optimizer | attributes | state (checkpoint slots) |\n|---|---|---|\n";
  for (const Optimizer& o : optimizers()) {
    std::string state;
    for (const char* slot : o.state) state += (state.empty() ? "" : ", ") + code(slot);
    out += row({code(o.name), attributes_text(o.attrs), state});
  }
  return out;
}

struct Section {
  const char* name;
  std::string (*render)();
};
const Section kSections[] = {{"ops", ops_table}, {"optimizers", optimizers_table}};

std::string begin_marker(const Section& s) { return "<!-- ops-doc: " + std::string(s.name) + " begin -->\n"; }
std::string end_marker(const Section& s) { return "<!-- ops-doc: " + std::string(s.name) + " end -->"; }

// `text` with every section between its markers rendered afresh.
std::string regenerate(std::string text, const std::string& file) {
  for (const Section& s : kSections) {
    const size_t begin = text.find(begin_marker(s)), end = text.find(end_marker(s));
    if (begin == std::string::npos || end == std::string::npos || end < begin)
      throw Failure{file + ": no '" + begin_marker(s).substr(0, begin_marker(s).size() - 1) + "' ... '" +
                    end_marker(s) + "' markers"};
    const size_t from = begin + begin_marker(s).size();
    text.replace(from, end - from, s.render());
  }
  return text;
}

std::string read(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw Failure{file + ": cannot read it"};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) {
      for (const Section& s : kSections) std::cout << s.render() << "\n";
      return 0;
    }
    if (args.size() != 2 || (args[0] != "--write" && args[0] != "--check"))
      throw Failure{"usage: mlperf-ops-doc [--write FILE | --check FILE]"};
    const std::string& file = args[1];
    const std::string current = read(file), fresh = regenerate(current, file);
    if (args[0] == "--check") {
      if (fresh == current) return 0;
      std::cerr << "mlperf-ops-doc: " << file << " is out of date with mlph/sdk/graph/op_schema.hpp: run " << argv[0]
                << " --write " << file << "\n";
      return 1;
    }
    std::ofstream out(file);
    out << fresh;
    if (!out) throw Failure{file + ": cannot write it"};
    return 0;
  } catch (const Failure& f) {
    std::cerr << "mlperf-ops-doc: " << f.message << "\n";
    return 2;
  }
}
