// The algorithm rule and the conv keys (backends/cuda/plan/algorithms.hpp).
#include <gtest/gtest.h>

#include "plan_fixtures.hpp"

namespace mlph::cuda::plan {
namespace {

using namespace fixtures;  // the folder's shared helpers (plan_fixtures.hpp)

TEST(CudaPlanAlgorithms, DeterminismMathAndWorkspaceCapDecideTheChoice) {
  const std::vector<Candidate> found = {
      {0, true, 3.0f, 0, true, false, false},         // FMA, deterministic, slow
      {1, true, 1.0f, 64, false, true, false},        // tensor cores, nondeterministic, fastest
      {2, true, 0.8f, 2u << 30, true, true, false},   // fastest, but past the default cap
      {3, true, 1.5f, 16, true, true, false},         // tensor cores, deterministic
      {4, true, 0.5f, 0, true, true, true},           // down-converts fp32 to fp16
      {5, false, 0.1f, 0, true, false, false},        // failed
  };
  EXPECT_EQ(choose(algorithm_rule(Precision::fp32, false), found), 0);  // no tensor cores: TF32 off
  EXPECT_EQ(choose(algorithm_rule(Precision::tf32, false), found), 1);
  EXPECT_EQ(choose(algorithm_rule(Precision::bf16, false), found), 4);  // half data: no candidate dropped for its math
  EXPECT_EQ(choose(algorithm_rule(Precision::fp16, false), {found[1], found[4]}), 1);
  EXPECT_EQ(choose(algorithm_rule(Precision::tf32, false), {found[1], found[4]}), 0);  // would round fp32 to fp16
  EXPECT_EQ(choose(algorithm_rule(Precision::bf16, true), found), 0);  // first listed, deterministic
  EXPECT_EQ(choose(algorithm_rule(Precision::bf16, true), {found.begin() + 1, found.end()}), 2);  // algo 3
  EXPECT_EQ(choose(algorithm_rule(Precision::tf32, false, size_t{4} << 30), found), 2);
  EXPECT_EQ(choose(algorithm_rule(Precision::tf32, false, 32), {found[1], found[3]}), 1);  // 64 bytes > 32
  EXPECT_EQ(choose(algorithm_rule(Precision::fp32, true), {found[1], found[4], found[5]}), -1);
  const AlgorithmRule timed = algorithm_rule(Precision::fp16, false, size_t{1} << 30, size_t{1} << 29);
  EXPECT_EQ(timed.workspace_cap, (size_t{1} << 29) / 10 * 9);  // at most 90% of what is free
  EXPECT_EQ(timed.selection, Selection::fastest);
  EXPECT_TRUE(timed.cublaslt_split_k);
  const AlgorithmRule fixed = algorithm_rule(Precision::fp16, true, size_t{1} << 30, size_t{1} << 29);
  EXPECT_EQ(fixed.workspace_cap, size_t{1} << 30);  // the same choice whatever else runs
  EXPECT_EQ(fixed.selection, Selection::first_listed);
  EXPECT_FALSE(fixed.cublaslt_split_k);
}

// Compile once per shape: the key holds every descriptor field and nothing else.
struct KeyCase {
  int64_t edge = 8, stride = 1, dilation = 1, pad = 1;
  bool bias = false, transpose = false;
};
ConvKey key_of(const KeyCase& t, DType data = DType::f32, MathMode math = MathMode::fma, int pass = 0) {
  Net net;
  const int32_t x = net.input("x", {2, t.edge, t.edge, 4});
  std::vector<int32_t> inputs{x, net.param("w", {3, 3, 4, 4})};
  if (t.bias) inputs.push_back(net.param("b", {4}));
  const std::vector<sdk::AttrInit> attrs = {{"stride", {double(t.stride), double(t.stride)}},
                                            {"dilation", {double(t.dilation), double(t.dilation)}},
                                            {"padding", {double(t.pad), double(t.pad)}}};
  const int64_t out = t.transpose ? (t.edge - 1) * t.stride - 2 * t.pad + t.dilation * 2 + 1
                                  : (t.edge + 2 * t.pad - t.dilation * 2 - 1) / t.stride + 1;
  const Program p = net.lower(net.op(t.transpose ? "conv_transpose" : "conv", "c", inputs, {2, out, out, 4}, attrs));
  return conv_key(*lower_nodes(p)[index_of(p, "c")].conv, data, math, pass);
}

TEST(CudaPlanAlgorithms, ConvKeysDifferInEveryDescriptorFieldAndOnlyThere) {
  const ConvKey base = key_of({});
  EXPECT_EQ(base, key_of({.bias = true}));  // a bias is our kernel's, not the search's business
  // Stride 4 with padding 1: dilation 1 and 2 give the same output size, only the dilation differs.
  EXPECT_NE(key_of({.stride = 4, .dilation = 1}), key_of({.stride = 4, .dilation = 2}));
  EXPECT_NE(base, key_of({.stride = 2}));
  EXPECT_NE(base, key_of({.edge = 10}));
  // A conv_transpose 4 -> 7 is the backward data of the conv 7 -> 4: the same descriptors, the same search.
  EXPECT_EQ(key_of({.edge = 7, .stride = 2}, DType::f32, MathMode::fma, 1), key_of({.edge = 4, .stride = 2, .transpose = true}, DType::f32, MathMode::fma, 1));
  EXPECT_NE(base, key_of({}, DType::bf16, MathMode::fma));
  EXPECT_NE(key_of({}, DType::bf16, MathMode::tensor_op), key_of({}, DType::bf16, MathMode::fma));
  EXPECT_NE(base, key_of({}, DType::f32, MathMode::fma, 2));
}

}  // namespace
}  // namespace mlph::cuda::plan
