// Numbers from text (sdk/util/numbers.hpp) as the core, the workloads' settings and plug-in options read
// them: integers straight into their final type or refused naming the key and the range, floats
// finite. Each case here was a silent narrowing or an undefined cast before (issue 16: 1, 14, 16, 17).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "mlph/core/config.hpp"
#include "mlph/sdk/model/compute.hpp"
#include "mlph/sdk/util/numbers.hpp"
#include "mlph/sdk/util/options.hpp"
#include "mlph/sdk/workload/hparams.hpp"
#include "mlph/test/error_of.hpp"

using namespace mlph;

namespace {

using test::error_of;

sdk::Options options(const std::vector<MLPH_KeyValue>& kv) { return sdk::Options(kv.data(), kv.size()); }

}  // namespace

TEST(SdkNumbers, IntegersParseIntoTheirFinalTypeOrNameTheRange) {
  EXPECT_EQ(sdk::parse_integer<uint32_t>("4294967295", "k"), 4294967295u);
  EXPECT_EQ(sdk::parse_integer<int>("-17", "k"), -17);
  EXPECT_EQ(sdk::parse_integer<int>("+17", "k"), 17);
  EXPECT_EQ(sdk::parse_integer<int64_t>("-9223372036854775808", "k"), INT64_MIN);
  EXPECT_EQ(sdk::parse_integer<uint64_t>("18446744073709551615", "k"), UINT64_MAX);
  // 4294967300 was cut to 4 by a 32-bit cast, 4294967296 to 0
  EXPECT_EQ(error_of([] { sdk::parse_integer<uint32_t>("4294967300", "train.batch_size"); }),
            "'train.batch_size' = \"4294967300\" is out of range: must be an integer from 0 to 4294967295");
  EXPECT_EQ(error_of([] { sdk::parse_integer<int>("4294967296", "optimizer.base_batch_size"); }),
            "'optimizer.base_batch_size' = \"4294967296\" is out of range: must be an integer from -2147483648 to "
            "2147483647");
  EXPECT_EQ(error_of([] { sdk::parse_integer<uint32_t>("-1", "k"); }),
            "'k' = \"-1\" is out of range: must be an integer from 0 to 4294967295");
  EXPECT_EQ(error_of([] { sdk::parse_integer<int64_t>("9223372036854775808", "k"); }),
            "'k' = \"9223372036854775808\" is out of range: must be an integer from -9223372036854775808 to "
            "9223372036854775807");
  EXPECT_EQ(error_of([] { sdk::parse_integer<int>("99999999999999999999999", "k"); }),
            "'k' = \"99999999999999999999999\" is out of range: must be an integer from -2147483648 to 2147483647");
  EXPECT_EQ(error_of([] { sdk::parse_integer<int>("7", "k", 1, 5); }), "'k' = \"7\" is out of range: must be an integer from 1 to 5");
  for (const char* text : {"", "4.0", "1e3", "0x10", " 4", "4 ", "--4", "+", "-", "four", "1_000"})
    EXPECT_EQ(error_of([&] { sdk::parse_integer<int>(text, "k"); }), std::string("'k' = \"") + text + "\" is not an integer")
        << text;
  EXPECT_EQ(sdk::integer_value<uint8_t>("255"), uint8_t{255});
  EXPECT_FALSE(sdk::integer_value<uint8_t>("256"));
  EXPECT_FALSE(sdk::integer_value<int>("1e300"));
}

TEST(SdkNumbers, FloatsMustBeFinite) {
  EXPECT_EQ(sdk::parse_finite("0.001", "k"), 0.001);
  EXPECT_EQ(sdk::parse_finite("-2.5e-3", "k"), -2.5e-3);
  EXPECT_EQ(sdk::parse_finite("+3", "k"), 3.0);
  EXPECT_EQ(sdk::parse_finite("1e30", "k"), 1e30);  // finite: schemas bound what is absurd
  for (const char* text : {"inf", "-inf", "Infinity", ".inf", "nan", "NaN", "1e400", "", "0.5abc", "0.5 ", "abc", "1,5"})
    EXPECT_EQ(error_of([&] { sdk::parse_finite(text, "optimizer.base_lr"); }),
              std::string("'optimizer.base_lr' = \"") + text + "\" is not a finite number")
        << text;
  EXPECT_FALSE(sdk::finite_value("nan"));
  EXPECT_EQ(sdk::finite_value("2"), 2.0);
}

TEST(SdkOptions, GettersTakeTheTargetType) {
  const sdk::Options o = options({{"train.batch_size", "4294967300"},
                                  {"train.epochs", "4294967296"},
                                  {"threads", "8"},
                                  {"optimizer.base_lr", "inf"},
                                  {"model.dropout", "0.5abc"},
                                  {"optimizer.decay_factors", "[0.5, 2x]"},
                                  {"optimizer.decay_boundaries", "[32, 1e300]"},
                                  {"scheduler.milestones", "[800, 1600]"},
                                  {"optimizer.betas", "[0.9, nan]"}});
  EXPECT_EQ(o.get_int<int>("threads", 0), 8);
  EXPECT_EQ(o.get_int("threads", 0LL), 8LL);
  EXPECT_EQ(o.get_int<uint32_t>("absent", 4), 4u);
  EXPECT_EQ(error_of([&] { o.get_int<uint32_t>("train.batch_size", 4); }),
            "'train.batch_size' = \"4294967300\" is out of range: must be an integer from 0 to 4294967295");
  EXPECT_EQ(error_of([&] { o.get_int<uint32_t>("train.epochs", 128); }),
            "'train.epochs' = \"4294967296\" is out of range: must be an integer from 0 to 4294967295");
  EXPECT_EQ(error_of([&] { o.get_number("optimizer.base_lr"); }), "'optimizer.base_lr' = \"inf\" is not a finite number");
  EXPECT_EQ(error_of([&] { o.get_number("model.dropout"); }), "'model.dropout' = \"0.5abc\" is not a finite number");
  EXPECT_EQ(error_of([&] { o.get_numbers("optimizer.decay_factors"); }),
            "'optimizer.decay_factors' = \"2x\" is not a finite number");
  EXPECT_EQ(error_of([&] { o.get_numbers("optimizer.betas"); }), "'optimizer.betas' = \"nan\" is not a finite number");
  EXPECT_EQ(error_of([&] { o.get_ints<int>("optimizer.decay_boundaries"); }),
            "'optimizer.decay_boundaries' = \"1e300\" is not an integer");
  EXPECT_EQ(o.get_ints<int64_t>("scheduler.milestones"), (std::vector<int64_t>{800, 1600}));
}

namespace {
constexpr sdk::HparamRule kBatch[] = {{"global_batch_size", "train.batch_size", sdk::per_rank_batch}};

std::string borrowed_batch(const char* logged, int64_t ranks) {
  const MLPH_KeyValue kv[] = {{"global_batch_size", logged}};
  std::string out;
  try {
    sdk::borrow(kBatch, sdk::LoggedHparams(kv, 1, ranks),
                [&](const char*, const char*, const std::string& value) { out = value; });
  } catch (const sdk::Error& e) {
    return e.what();
  }
  return out;
}
}  // namespace

// A borrowed global batch of 1e300 went through an undefined cast to -9223372036854775808.
// Issue 40: one list of boolean spellings (sdk::bool_value) for the configuration's booleans and for
// plug-in options (Options::get_bool): a value the configuration accepts (a workload's data.cache:
// yes) means the same to the plug-in, which read only "true" and "True" before.
TEST(SdkOptions, BooleansHaveOneListOfSpellings) {
  for (const char* on : {"1", "true", "True", "yes"}) {
    EXPECT_EQ(sdk::bool_value(on), std::optional<bool>(true)) << on;
    EXPECT_TRUE(core::as_bool("k", on)) << on;
    EXPECT_TRUE(options({{"cache", on}}).get_bool("cache", false, "cosmoflow")) << on;
  }
  for (const char* off : {"0", "false", "False", "no"}) {
    EXPECT_EQ(sdk::bool_value(off), std::optional<bool>(false)) << off;
    EXPECT_FALSE(core::as_bool("k", off)) << off;
    EXPECT_FALSE(options({{"cache", off}}).get_bool("cache", true, "cosmoflow")) << off;
  }
  for (const char* neither : {"", "TRUE", "on", "2", " true", "maybe"}) {
    EXPECT_EQ(sdk::bool_value(neither), std::nullopt) << neither;
    EXPECT_THROW(core::as_bool("k", neither), core::ConfigError) << neither;
  }
  EXPECT_TRUE(options({}).get_bool("cache", true, "cosmoflow"));
  EXPECT_FALSE(options({}).get_bool("cache", false, "cosmoflow"));
  EXPECT_EQ(error_of([] { options({{"deterministic", "maybe"}}).get_bool("deterministic", false, "reference backend"); }),
            "reference backend: option 'deterministic' is 'maybe'; expected 0, 1, false or true");
  // The shared compute option reads through it.
  EXPECT_TRUE(sdk::read_compute_settings(options({{"deterministic", "yes"}}), {sdk::Precision::fp32}, "b").deterministic);
}

TEST(SdkHparams, PerRankBatchIsAnIntegerOrRefused) {
  EXPECT_EQ(borrowed_batch("2048", 512), "4");
  EXPECT_EQ(borrowed_batch("1e300", 1), "global_batch_size = 1e300: must be a positive integer");
  EXPECT_EQ(borrowed_batch("9223372036854775808", 1), "global_batch_size = 9223372036854775808: must be a positive integer");
  EXPECT_EQ(borrowed_batch("-512", 1), "global_batch_size = -512: must be a positive integer");
  EXPECT_EQ(borrowed_batch("512.5", 1), "global_batch_size = 512.5: must be a positive integer");
  EXPECT_EQ(borrowed_batch("Infinity", 1), "global_batch_size = Infinity: must be a positive integer");
  EXPECT_EQ(borrowed_batch("512", 0), "global_batch_size = 512: does not split over 0 ranks (the per-rank batch must be a whole number)");
}
