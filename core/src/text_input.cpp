#include "mlph/core/text_input.hpp"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "mlph/sdk/storage/storage.hpp"

namespace mlph::core {
namespace {

constexpr const char* kNoAliases = "YAML anchors and aliases are not accepted (an alias can expand without bound)";

// Counts the nodes of a document as the parser reports them and refuses anchors, aliases and a key
// given twice in one map (yaml-cpp would keep the first, Python's json the last: neither is safe).
class BoundedDocument : public YAML::EventHandler {
 public:
  explicit BoundedDocument(size_t max_nodes) : max_nodes_(max_nodes) {}
  size_t nodes() const { return nodes_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { node(mark, anchor, ""); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { throw YamlError(mark.line + 1, kNoAliases); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& value) override {
    node(mark, anchor, value);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    node(mark, anchor, std::nullopt);
    open_.push_back(Container{false, true, {}});
  }
  void OnSequenceEnd() override { open_.pop_back(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    node(mark, anchor, std::nullopt);
    open_.push_back(Container{true, true, {}});
  }
  void OnMapEnd() override { open_.pop_back(); }
  void OnAnchor(const YAML::Mark& mark, const std::string&) override { throw YamlError(mark.line + 1, kNoAliases); }

 private:
  struct Container {
    bool map;
    bool at_key = true;          // a map's next node is a key
    std::set<std::string> keys;  // its scalar keys so far
  };

  // `scalar`: the node's text when it is a scalar (or null: ""), nullopt for a sequence or map.
  void node(const YAML::Mark& mark, YAML::anchor_t anchor, const std::optional<std::string>& scalar) {
    if (anchor != YAML::NullAnchor) throw YamlError(mark.line + 1, kNoAliases);
    if (++nodes_ > max_nodes_) throw YamlTooLarge(mark.line + 1, fmt::format("more than {} YAML nodes", max_nodes_));
    if (open_.empty() || !open_.back().map) return;
    Container& map = open_.back();
    if (map.at_key && scalar && !map.keys.insert(*scalar).second)
      throw YamlError(mark.line + 1, fmt::format("the key \"{}\" is given twice", escaped(*scalar, 120)));
    map.at_key = !map.at_key;
  }
  size_t max_nodes_, nodes_ = 0;
  std::vector<Container> open_;
};

}  // namespace

std::string escaped(std::string_view text, size_t max_shown) {
  std::string out;
  for (const unsigned char c : text.substr(0, max_shown)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  return text.size() > max_shown ? out + "..." : out;
}

YamlError::YamlError(int line_, const std::string& reason_)
    : std::runtime_error(fmt::format("line {}: {}", line_, reason_)), line(line_), reason(reason_) {}

std::string read_text_file(const std::filesystem::path& file, uint64_t max_bytes, std::string_view what) {
  std::string text;
  try {
    sdk::read_regular_file(file.string(), max_bytes, [&](size_t size) {
      text.resize(size);
      return text.data();
    });
  } catch (const sdk::Error& e) {
    if (e.code() == MLPH_NOT_FOUND) throw InputError(fmt::format("{}: {} not found", file.string(), what));
    throw InputError(e.what());
  }
  return text;
}

YAML::Node load_yaml(const std::string& text, size_t max_nodes, size_t* nodes) {
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    BoundedDocument document(max_nodes);
    parser.HandleNextDocument(document);
    if (nodes) *nodes = document.nodes();
    return YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {  // its message is "bad file"
    throw YamlError(e.mark.line + 1, fmt::format("invalid YAML: nested {} levels deep", e.depth()));
  } catch (const YAML::Exception& e) {
    throw YamlError(e.mark.line + 1, "invalid YAML: " + e.msg);
  }
}

}  // namespace mlph::core
