// Run configuration: schema-checked keys layered as defaults < config file < --set.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlph/workload.h"

namespace mlph::core {

// One line naming the key and where it came from (file:line, --set or the default).
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ConfigValue {
  std::string text;    // YAML text: scalar or flow sequence, e.g. "0.5", "[16, 32]"
  std::string origin;  // "default", "configs/x.yaml:12", "--set"
};

// Parsed views of YAML text (numbers as sdk/util/numbers.hpp reads them: an integer of 64 bits, a finite
// float); throw ConfigError naming `key` and the text.
double as_number(const std::string& key, const std::string& text);
long long as_int(const std::string& key, const std::string& text);
bool as_bool(const std::string& key, const std::string& text);
std::vector<std::string> list_items(const std::string& key, const std::string& text);  // "[16, 32]": "16", "32"
std::vector<double> as_number_list(const std::string& key, const std::string& text);

// A seed drawn afresh (run.seed = 0; a campaign's runs without --seed): positive and below 2^31, so
// that it fits an int32 too (the references' seeds are). The one formula for both.
uint64_t fresh_seed();

// The core's own configuration keys (plug-ins, the MLPerf log's submission keys, the seed...);
// the workload's come from its plug-in.
std::vector<MLPH_ParamSpec> core_schema();

class Config {
 public:
  // `schema` holds every key a run accepts (core's and the workload's). `file` may be empty.
  // `sets` are "key=value" strings from --set; later ones win.
  static Config load(const std::vector<MLPH_ParamSpec>& schema, const std::string& file,
                     const std::vector<std::string>& sets);
  // The same with the config's text given; `file` names it in messages.
  static Config load_text(const std::vector<MLPH_ParamSpec>& schema, const std::string& text, const std::string& file,
                          const std::vector<std::string>& sets);

  // Reads only the top-level `workload:` key of a config file, if any (the schema depends on it).
  static std::optional<std::string> peek_workload(const std::string& file);
  // The scalar at the dotted `key` of a config file, if any; ConfigError for a file that cannot be read.
  static std::optional<std::string> peek(const std::string& file, const std::string& key);

  const std::string& get(const std::string& key) const;
  const ConfigValue& entry(const std::string& key) const;
  const std::map<std::string, ConfigValue>& values() const { return values_; }
  // Keys under `prefix.` that the schema does not own (passed through to a plug-in's options).
  const std::map<std::string, ConfigValue>& passthrough() const { return passthrough_; }

  // Types and bounds of every key; in the closed division also the closed rules. Throws the first
  // violation as one line naming key, value, origin and the rule.
  void validate(const std::vector<MLPH_ParamSpec>& schema, bool closed_division) const;

 private:
  std::map<std::string, ConfigValue> values_;
  std::map<std::string, ConfigValue> passthrough_;
};

// The prefixes whose keys go to plug-ins as options, unchecked by the core.
inline const std::vector<std::string>& passthrough_prefixes() {
  static const std::vector<std::string> prefixes = {"backend.", "comms.", "storage."};
  return prefixes;
}

}  // namespace mlph::core
