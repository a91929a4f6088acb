#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "mlph/core/config.hpp"
#include "mlph/test/error_of.hpp"

using namespace mlph::core;

namespace {

const std::vector<MLPH_ParamSpec>& schema() {
  static const std::vector<MLPH_ParamSpec> specs = {
      {"model.kernel_size", MLPH_TYPE_INT, "3", "", MLPH_CLOSED_FIXED, MLPH_BOUND_MIN, 1, 0, "kernel rule"},
      {"model.dropout", MLPH_TYPE_FLOAT, "0.5", "", MLPH_CLOSED_TUNABLE,
       MLPH_BOUND_MIN | MLPH_BOUND_MAX | MLPH_BOUND_MAX_EXCLUSIVE, 0, 1, "dropout in [0, 1)"},
      {"optimizer.decay_factors", MLPH_TYPE_FLOAT_LIST, "[0.25, 0.125]", "", MLPH_CLOSED_TUNABLE,
       MLPH_BOUND_MIN | MLPH_BOUND_MIN_EXCLUSIVE | MLPH_BOUND_MAX | MLPH_BOUND_MAX_EXCLUSIVE, 0, 1, "factors in (0,1)"},
      {"data.dir", MLPH_TYPE_STRING, "", "", MLPH_CLOSED_FREE, 0, 0, 0, ""},
      {"optimizer.lr", MLPH_TYPE_FLOAT, "0.001", "", MLPH_CLOSED_TUNABLE, MLPH_BOUND_MIN | MLPH_BOUND_MIN_EXCLUSIVE, 0, 0,
       "lr > 0"},
      {"optimizer.decay_boundaries", MLPH_TYPE_INT_LIST, "[32, 64]", "", MLPH_CLOSED_TUNABLE,
       MLPH_BOUND_MIN | MLPH_BOUND_MIN_EXCLUSIVE, 0, 0, "positive"},
  };
  return specs;
}

std::string write_yaml(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

// ConfigError is the core's own, not an sdk::Error.
std::string error_of(const std::function<void()>& f) { return mlph::test::error_of<ConfigError>(f); }

}  // namespace

TEST(Config, LayersDefaultsFileAndSet) {
  const std::string file = write_yaml("layers.yaml", "model:\n  dropout: 0.25\ndata:\n  dir: /data\n");
  Config c = Config::load(schema(), file, {"data.dir=/other"});
  EXPECT_EQ(c.get("model.kernel_size"), "3");
  EXPECT_EQ(c.entry("model.kernel_size").origin, "default");
  EXPECT_EQ(c.get("model.dropout"), "0.25");
  EXPECT_EQ(c.entry("model.dropout").origin, file + ":2");
  EXPECT_EQ(c.get("data.dir"), "/other");
  EXPECT_EQ(c.entry("data.dir").origin, "--set");
  EXPECT_EQ(c.get("optimizer.decay_factors"), "[0.25, 0.125]");
}

TEST(Config, UnknownKeyNamesFileLineAndSuggests) {
  const std::string file = write_yaml("typo.yaml", "model:\n  kernel_size: 3\n  dropuot: 0.1\n");
  EXPECT_EQ(error_of([&] { Config::load(schema(), file, {}); }),
            file + ":3: unknown key 'model.dropuot' (did you mean 'model.dropout'?)");
  EXPECT_EQ(error_of([&] { Config::load(schema(), "", {"foo.bar=1"}); }), "--set: unknown key 'foo.bar'");
}

TEST(Config, PassthroughKeysGoToPlugins) {
  Config c = Config::load(schema(), "", {"backend.threads=2"});
  ASSERT_EQ(c.passthrough().count("backend.threads"), 1u);
  EXPECT_EQ(c.passthrough().at("backend.threads").text, "2");
}

TEST(Config, ClosedDivisionRefusesFixedKeysWithTheRule) {
  Config c = Config::load(schema(), "", {"model.kernel_size=2"});
  EXPECT_NO_THROW(c.validate(schema(), false));
  EXPECT_EQ(error_of([&] { c.validate(schema(), true); }),
            "--set: 'model.kernel_size' = 2: not allowed in the closed division, which fixes it at 3 (kernel rule)");
}

TEST(Config, OutOfRangeTunableIsRefused) {
  Config c = Config::load(schema(), "", {"model.dropout=1.0"});
  EXPECT_EQ(error_of([&] { c.validate(schema(), true); }),
            "--set: 'model.dropout' = 1.0 is out of range: must be >= 0 and < 1 (dropout in [0, 1))");
  Config lists = Config::load(schema(), "", {"optimizer.decay_factors=[0.5, 1.5]"});
  EXPECT_NE(error_of([&] { lists.validate(schema(), false); }).find("is out of range: must be > 0 and < 1"),
            std::string::npos);
}

TEST(Config, TypeErrorsNameTheKey) {
  Config c = Config::load(schema(), "", {"model.kernel_size=three"});
  EXPECT_EQ(error_of([&] { c.validate(schema(), false); }), "--set: 'model.kernel_size' = \"three\" is not an integer");
  const std::string file = write_yaml("types.yaml", "model:\n  kernel_size: 3.5\n");
  Config f = Config::load(schema(), file, {});
  EXPECT_EQ(error_of([&] { f.validate(schema(), false); }), file + ":2: 'model.kernel_size' = \"3.5\" is not an integer");
}

// Past 64 bits an integer is out of range, not cut; list elements are integers, not 1e300.
TEST(Config, IntegersAreRangeCheckedAsIntegers) {
  Config big = Config::load(schema(), "", {"model.kernel_size=99999999999999999999"});
  EXPECT_EQ(error_of([&] { big.validate(schema(), false); }),
            "--set: 'model.kernel_size' = \"99999999999999999999\" is out of range: must be an integer from "
            "-9223372036854775808 to 9223372036854775807");
  Config list = Config::load(schema(), "", {"optimizer.decay_boundaries=[32, 1e300]"});
  EXPECT_EQ(error_of([&] { list.validate(schema(), false); }),
            "--set: 'optimizer.decay_boundaries' = \"1e300\" is not an integer");
  EXPECT_NO_THROW(Config::load(schema(), "", {"optimizer.decay_boundaries=[3, 9]"}).validate(schema(), true));
}

// Non-finite numbers pass no bound: refused in the open division too (issue 16, item 16).
TEST(Config, FloatsMustBeFiniteInEveryDivision) {
  for (const char* text : {"inf", ".inf", "nan", ".nan", "1e400", "Infinity"}) {
    Config c = Config::load(schema(), "", {std::string("optimizer.lr=") + text});
    EXPECT_EQ(error_of([&] { c.validate(schema(), false); }),
              std::string("--set: 'optimizer.lr' = \"") + text + "\" is not a finite number");
  }
  Config list = Config::load(schema(), "", {"optimizer.decay_factors=[0.5, .nan]"});
  EXPECT_EQ(error_of([&] { list.validate(schema(), false); }),
            "--set: 'optimizer.decay_factors' = \".nan\" is not a finite number");
}

// An alias's expansion is unbounded ("billion laughs"): anchors and aliases are refused before
// anything is built, naming the line (the bombs themselves run in tests/integration/bad_input_test).
TEST(Config, AnchorsAndAliasesAreRefused) {
  const std::string file = write_yaml("alias.yaml", "model:\n  dropout: 0.25\ndata: &d\n  dir: x\nother: *d\n");
  EXPECT_EQ(error_of([&] { Config::load(schema(), file, {}); }),
            file + ":3: YAML anchors and aliases are not accepted (an alias can expand without bound)");
  const std::string alias_only = write_yaml("alias2.yaml", "model:\n  dropout: *d\n");
  EXPECT_NE(error_of([&] { Config::load(schema(), alias_only, {}); }).find(alias_only + ":2: "), std::string::npos);
  Config list = Config::load(schema(), "", {"optimizer.decay_factors=[&a 0.5, *a]"});
  EXPECT_EQ(error_of([&] { list.validate(schema(), false); }),
            "--set: 'optimizer.decay_factors': YAML anchors and aliases are not accepted (an alias can expand without "
            "bound)");
}

// Issue 28, defect 15: yaml-cpp keeps the first of two equal keys, Python the last: a key given twice
// is refused, naming its line, in a file or in a --set value alike (unknown keys are errors too).
TEST(Config, AKeyGivenTwiceIsRefused) {
  const std::string file = write_yaml("twice.yaml", "model:\n  dropout: 0.25\n  kernel_size: 5\n  dropout: 0.75\n");
  EXPECT_EQ(error_of([&] { Config::load(schema(), file, {}); }), file + ":4: the key \"dropout\" is given twice");
  const std::string nested = write_yaml("twice2.yaml", "model:\n  dropout: 0.25\nmodel:\n  kernel_size: 5\n");
  EXPECT_EQ(error_of([&] { Config::load(schema(), nested, {}); }), nested + ":3: the key \"model\" is given twice");
  // Equal keys in different maps are no repetition.
  const std::string apart = write_yaml("apart.yaml", "model:\n  dropout: 0.25\ndata:\n  dropout: 1\n");
  EXPECT_NE(error_of([&] { Config::load(schema(), apart, {}); }).find("unknown"), std::string::npos);
}

TEST(Config, TheFileMustBeASmallRegularFile) {
  const auto dir = std::filesystem::temp_directory_path() / "config-dir.yaml";
  std::filesystem::create_directories(dir);
  EXPECT_EQ(error_of([&] { Config::load(schema(), dir.string(), {}); }), dir.string() + ": is a directory, not a regular file");
  const std::string big = write_yaml("big.yaml", "");
  std::filesystem::resize_file(big, 3u << 20);  // sparse: nothing is written
  EXPECT_EQ(error_of([&] { Config::load(schema(), big, {}); }),
            big + ": 3145728 bytes, more than the 1048576 bytes allowed");
}

TEST(Config, InvalidYamlNamesTheLine) {
  const std::string file = write_yaml("broken.yaml", "model:\n  dropout: [0.1\n");
  EXPECT_NE(error_of([&] { Config::load(schema(), file, {}); }).find(file + ":"), std::string::npos);
  EXPECT_EQ(error_of([&] { Config::load(schema(), "/nonexistent/x.yaml", {}); }),
            "/nonexistent/x.yaml: config file not found");
}

TEST(Config, PeeksTheWorkload) {
  EXPECT_EQ(Config::peek_workload(write_yaml("w.yaml", "workload: cosmoflow\n")).value_or(""), "cosmoflow");
  EXPECT_FALSE(Config::peek_workload("").has_value());
}
