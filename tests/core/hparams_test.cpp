// The SDK side of hyperparameter borrowing (sdk/workload/hparams.hpp, sdk/util/json.hpp): the JSON text views a
// workload reads and the table walk that names the log key in every error.
#include <gtest/gtest.h>

#include "mlph/sdk/workload/hparams.hpp"

using namespace mlph;

TEST(SdkJson, TextViews) {
  EXPECT_EQ(sdk::json_number_value("1e-06"), 1e-06);
  EXPECT_EQ(sdk::json_number_value("512"), 512.0);
  EXPECT_FALSE(sdk::json_number_value("\"512\""));
  EXPECT_FALSE(sdk::json_number_value("true"));
  EXPECT_FALSE(sdk::json_number_value("[1]"));
  EXPECT_EQ(sdk::json_string_value("\"LAMB\""), "LAMB");
  EXPECT_FALSE(sdk::json_string_value("3"));
  EXPECT_EQ(sdk::json_list_items("[20, 22,23]"), (std::vector<std::string>{"20", "22", "23"}));
  EXPECT_EQ(sdk::json_list_items("[]"), std::vector<std::string>{});
  EXPECT_FALSE(sdk::json_list_items("0.5"));
}

namespace {
std::string doubled(const sdk::LoggedHparams& h, const std::string& key) { return sdk::json_number(2 * h.number(key)); }
constexpr sdk::HparamRule kRules[] = {
    {"global_batch_size", "train.batch_size", sdk::per_rank_batch},
    {"lr", "optimizer.lr", doubled},
    {"lr", nullptr, sdk::as_word},  // checked only: fails for a number
};

std::vector<std::string> borrow(const std::vector<MLPH_KeyValue>& logged, int64_t ranks) {
  std::vector<std::string> sets;
  sdk::borrow(kRules, sdk::LoggedHparams(logged.data(), logged.size(), ranks),
              [&](const char* log_key, const char* config_key, const std::string& value) {
                sets.push_back(std::string(log_key) + ">" + config_key + "=" + value);
              });
  return sets;
}

std::string error_of(const std::vector<MLPH_KeyValue>& logged, int64_t ranks) {
  try {
    borrow(logged, ranks);
  } catch (const sdk::Error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(SdkHparams, RowsInOrderAndErrorsNameTheLogKey) {
  EXPECT_EQ(borrow({{"global_batch_size", "512"}}, 4), std::vector<std::string>{"global_batch_size>train.batch_size=128"});
  EXPECT_EQ(error_of({{"global_batch_size", "512"}, {"lr", "0.25"}}, 1), "lr = 0.25: must be a string");
  EXPECT_EQ(error_of({{"global_batch_size", "512"}}, 3),
            "global_batch_size = 512: does not split over 3 ranks (the per-rank batch must be a whole number)");
  EXPECT_EQ(error_of({{"global_batch_size", "\"512\""}}, 1), "global_batch_size = \"512\": must be a positive integer");
  EXPECT_EQ(error_of({{"lr", "0.5"}}, 1), "lr = 0.5: must be a string");  // the second lr row
  const std::vector<const char*> keys = sdk::log_keys(kRules);  // each once, in order
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_STREQ(keys[0], "global_batch_size");
  EXPECT_STREQ(keys[1], "lr");
}
