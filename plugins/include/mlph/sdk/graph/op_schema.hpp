// The op catalogue of docs/ops.md as data: per op its inputs (dtypes, optional or variadic), its
// output, its attributes (type, how many values, range, default), its shape rule and whether it
// passes gradients; the optimizers likewise. sdk/graph/validate.hpp checks every graph against it once,
// for every backend; tools/ops-doc renders docs/ops.md's tables from it.
//
// Op-sets: MLPH_Graph.opset names the catalogue a graph was written against (graph.h). Op-set 1 is
// the catalogue of ABI 1.2; op-set 2 (ABI 1.5) adds the spatial ops halo_exchange and spatial_gather.
// Adding an op, attribute or optimizer appends it here with `since` set to a new op-set number and
// bumps MLPH_OPSET; nothing is ever removed or given a new meaning.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "mlph/graph.h"

namespace mlph::sdk::schema {

// ---- dtypes ---------------------------------------------------------------------------------------

using DTypes = unsigned;  // a set of MLPH_DType, one bit each
constexpr DTypes dtype_bit(MLPH_DType t) { return 1u << static_cast<unsigned>(t); }
inline constexpr DTypes kF32 = dtype_bit(MLPH_DTYPE_F32), kI16 = dtype_bit(MLPH_DTYPE_I16),
                        kI32 = dtype_bit(MLPH_DTYPE_I32);

inline std::string dtype_name(MLPH_DType t) {
  static const char* const names[] = {"float32", "float16", "bfloat16", "float64", "int8",
                                      "int16",   "int32",   "int64",    "uint8"};
  const auto i = static_cast<unsigned>(t);
  return i < std::size(names) ? names[i] : "dtype " + std::to_string(i);
}

// "float32", "float32 or int16", "float32, int16 or int32"
inline std::string dtypes_text(DTypes set) {
  std::vector<std::string> names;
  for (unsigned t = 0; t < 32; ++t)
    if (set & (1u << t)) names.push_back(dtype_name(static_cast<MLPH_DType>(t)));
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

// The shortest text that reads back as `v` (1e-05, 0.1, 3).
inline std::string number_text(double v) {
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, v).ptr;
  return std::string(buffer, end);
}

// ---- inputs ---------------------------------------------------------------------------------------

enum class Arity { one, optional, variadic };  // optional and variadic inputs come last; variadic: one or more

struct Input {
  const char* name;
  const char* shape = "";  // for the docs: "[N,S..,Ci]"
  DTypes dtypes = kF32;
  Arity arity = Arity::one;
  bool state = false;  // a parameter without MLPH_PARAM_TRAINABLE that the op updates in training
};

// ---- attributes -----------------------------------------------------------------------------------

enum class AttrType { integer, integers, number, numbers };  // every attribute of op-set 1 is numeric

// How many values a list attribute holds, following the node's shapes.
enum class Count {
  one,               // a scalar (integer, number)
  spatial,           // one per spatial dim of the first input [N, spatial..., C]
  spatial_or_twice,  // that, or two per spatial dim (padding: all befores, then all afters)
  output_rank,       // one per dim of the output
  channels,          // one per channel (last dim) of the first input
};

// Where every value of a numeric attribute must lie; always finite.
struct Range {
  double low = -std::numeric_limits<double>::infinity(), high = std::numeric_limits<double>::infinity();
  bool low_open = true, high_open = true;

  bool contains(double v) const {
    return std::isfinite(v) && (low_open ? v > low : v >= low) && (high_open ? v < high : v <= high);
  }
  std::string text() const {  // "finite", ">= 1", "> 0", "in [0, 1)"
    if (std::isinf(low) && std::isinf(high)) return "finite";
    if (std::isinf(high)) return (low_open ? "> " : ">= ") + number_text(low);
    return "in " + std::string(low_open ? "(" : "[") + number_text(low) + ", " + number_text(high) +
           (high_open ? ")" : "]");
  }
};
inline Range any_number() { return {}; }
inline Range at_least(double v) { return {v, std::numeric_limits<double>::infinity(), false, true}; }
inline Range above(double v) { return {v, std::numeric_limits<double>::infinity(), true, true}; }
inline Range closed(double low, double high) { return {low, high, false, false}; }
inline Range half_open(double low, double high) { return {low, high, false, true}; }

// What an absent attribute means.
struct Default {
  enum class Kind { required, value, attribute, output_shape } kind = Kind::required;
  double value = 0;                  // Kind::value: every entry
  const char* attribute = nullptr;   // Kind::attribute: a copy of this (earlier) attribute
};
inline Default required() { return {}; }
inline Default fill(double v) { return {Default::Kind::value, v, nullptr}; }
inline Default same_as(const char* attribute) { return {Default::Kind::attribute, 0, attribute}; }
inline Default output_shape() { return {Default::Kind::output_shape, 0, nullptr}; }

struct Attribute {
  const char* name;
  AttrType type;
  Count count;
  Range range;
  Default absent;
  const char* doc = "";  // more for the docs
  uint32_t since = 1;    // the op-set that added it
};

// ---- ops ------------------------------------------------------------------------------------------

// The shape rules, each implemented once in sdk/graph/validate.hpp.
enum class ShapeRule {
  elementwise,          // every input as the first; output as the first
  loss,                 // prediction and target alike; scalar output
  conv,                 // conv window: x [N,S..,Ci], w [K..,Ci/g,Co], b [Co] -> [N,O..,Co]
  conv_transpose,       // the adjoint of conv: x [N,S..,Ci], w [K..,Co,Ci], b [Co] -> [N,O..,Co]
  pool,                 // pooling window, no padding: [N,S..,C] -> [N,O..,C]
  dense,                // [N,in] x [in,out] (+ [out]) -> [N,out]
  reshape,              // same element count; attribute `shape` is the output's
  per_channel,          // x [N,..,C] and [C] vectors; output as x
  batch_norm,           // per_channel, and more than one value per channel in training
  concat,               // along the last axis
  global_pool,          // [N,S..,C] -> [N,1..,C]
  broadcast,            // size-1 spatial dims repeated to the output (attribute `shape`)
  segmentation_loss,    // logits [N,S..,C], labels [N,S..] -> scalar
  segmentation_metric,  // logits [N,S..,C], labels [N,S..] -> [N]
  halo,                 // [N,S..,C] -> [N,S+before+after..,C] (attributes grid, halo)
  gather,               // [N,S..,C] -> [N,S*grid..,C] (attribute grid)
};

struct Op {
  const char* name;
  std::vector<Input> inputs;
  const char* output;  // its shape, for the docs; always float32
  std::vector<Attribute> attrs;
  ShapeRule shape;
  bool gradient;  // passes gradients to its inputs (false: preprocessing or an evaluation metric)
  const char* semantics;
  uint32_t since = 1;  // the op-set that added it
  // Its products may compute in a backend's reduced precision (backend.precision tf32, bf16, fp16:
  // operands rounded, float32 accumulation); every other op computes in float32 at any precision.
  bool reduced_precision = false;
};

struct Optimizer {
  const char* name;
  std::vector<Attribute> attrs;
  // Its state per trainable parameter, each of the parameter's shape: the slot names of
  // MLPH_BackendApi.read_state (ABI 1.4), the same in every backend, so checkpoints agree.
  std::vector<const char*> state;
  uint32_t since = 1;
};

namespace detail {
inline Attribute window_ints(const char* name, double fallback, double minimum, const char* doc = "") {
  return {name, AttrType::integers, Count::spatial, at_least(minimum), fill(fallback), doc};
}
inline Attribute padding() {
  return {"padding", AttrType::integers, Count::spatial_or_twice, at_least(0), fill(0),
          "one per dim = symmetric, or two per dim = all befores then all afters, e.g. `[0,0,0,1,1,1]` for Keras "
          "'same' with an even kernel"};
}
inline Attribute number(const char* name, Range range, Default absent, const char* doc = "") {
  return {name, AttrType::number, Count::one, range, absent, doc};
}
inline Attribute grid() {
  return {"grid", AttrType::integers, Count::spatial, at_least(1), required(),
          "ranks along each spatial dim; the `prod(grid)` consecutive ranks `rank / prod(grid)` hold one sample, "
          "row-major: rank `rank % prod(grid)` has the block at grid coordinates `c`"};
}
}  // namespace detail

inline const std::vector<Op>& ops() {
  using detail::number;
  using detail::padding;
  using detail::window_ints;
  static const std::vector<Op> table = {
      {"log1p", {{"x", "", kI16 | kF32}}, "same shape", {}, ShapeRule::elementwise, false,
       "`y = log(1 + float(x))` (natural log); preprocessing"},
      {"conv",
       {{"x", "[N,S..,Ci]"}, {"w", "[K..,Ci/g,Co]"}, {"b", "[Co]", kF32, Arity::optional}},
       "`[N,O..,Co]`",
       {window_ints("stride", 1, 1), window_ints("dilation", 1, 1), padding(),
        {"groups", AttrType::integer, Count::one, at_least(1), fill(1), "divides Ci and Co"}},
       ShapeRule::conv, true,
       "cross-correlation with zero padding; `O = floor((S + p_before + p_after - d(k-1) - 1)/s) + 1`; spatial rank "
       "2 or 3",
       1, true},
      {"leaky_relu", {{"x"}}, "same", {number("alpha", any_number(), required())}, ShapeRule::elementwise, true,
       "`y = x > 0 ? x : alpha*x`; `dy/dx = x > 0 ? 1 : alpha`"},
      {"relu", {{"x"}}, "same", {}, ShapeRule::elementwise, true, "`y = max(x, 0)`; `dy/dx = x > 0`"},
      {"tanh", {{"x"}}, "same", {}, ShapeRule::elementwise, true, "`y = tanh(x)`"},
      {"scale", {{"x"}}, "same", {number("factor", any_number(), required())}, ShapeRule::elementwise, true,
       "`y = factor * x`"},
      {"max_pool", {{"x", "[N,S..,C]"}}, "`[N,O..,C]`",
       {{"kernel", AttrType::integers, Count::spatial, at_least(1), required()},
        {"stride", AttrType::integers, Count::spatial, at_least(1), same_as("kernel"), "as Keras"}},
       ShapeRule::pool, true,
       "no padding (Keras 'valid'); the gradient goes to the first maximum of each window in row-major window "
       "order"},
      {"reshape", {{"x"}}, "any shape with the same count",
       {{"shape", AttrType::integers, Count::output_rank, at_least(1), output_shape(), "full, batch included"}},
       ShapeRule::reshape, true,
       "row-major reinterpretation; with channels-last activations this is Keras' `Flatten`"},
      {"dense", {{"x", "[N,in]"}, {"w", "[in,out]"}, {"b", "[out]", kF32, Arity::optional}}, "`[N,out]`", {},
       ShapeRule::dense, true, "`y = x·w + b`", 1, true},
      {"dropout", {{"x"}}, "same", {number("rate", half_open(0, 1), required())}, ShapeRule::elementwise, true,
       "training: keep element `i` when `mlph_uniform(graph.seed, node_index, step, i) >= rate` (compared in "
       "double) and scale kept ones by `1/(1-rate)`, else 0 (`node_index` = position in `graph.nodes`, `step` = "
       "`MLPH_StepArgs.micro_step`, the micro-batch counter (= `step` without gradient accumulation)); evaluation: "
       "identity"},
      {"mse", {{"prediction"}, {"target", "same shape"}}, "scalar", {}, ShapeRule::loss, true,
       "`mean((p - t)^2)` over all elements"},
      {"abs_error_sum", {{"prediction"}, {"target", "same shape"}}, "scalar", {}, ShapeRule::loss, false,
       "`sum(|p - t|)`; evaluation output"},
      {"conv_transpose",
       {{"x", "[N,S..,Ci]"}, {"w", "[K..,Co,Ci]"}, {"b", "[Co]", kF32, Arity::optional}},
       "`[N,O..,Co]`",
       {window_ints("stride", 1, 1), window_ints("dilation", 1, 1), padding(),
        window_ints("output_padding", 0, 0, "added after")},
       ShapeRule::conv_transpose, true,
       "the adjoint of `conv`: `y[n,o,co] = sum over i,k,ci with o = i*s - p_before + k*d of x[n,i,ci]*w[k,co,ci]` "
       "(+ b); `O = (S-1)*s - p_before - p_after + d(k-1) + output_padding + 1`; groups 1 only. PyTorch "
       "`ConvTranspose2d(k3,s2,p1,output_padding=1)` = padding `[1,1]`, output_padding `[1,1]`, weight "
       "`[Ci,Co,kh,kw]` permuted to `[kh,kw,Co,Ci]`",
       1, true},
      {"batch_norm",
       {{"x", "[N,S..,C]"},
        {"gamma", "[C]"},
        {"beta", "[C]"},
        {"running_mean", "[C]", kF32, Arity::one, true},
        {"running_var", "[C]", kF32, Arity::one, true}},
       "same as x",
       {number("eps", above(0), fill(1e-5)), number("momentum", closed(0, 1), fill(0.1)),
        {"group_size", AttrType::integer, Count::one, at_least(1), fill(1),
         "ranks whose batches share the statistics; ABI 1.2"}},
       ShapeRule::batch_norm, true,
       "training: `mean`, biased `var` over N and all spatial positions (M > 1 values per channel); `y = "
       "gamma*(x-mean)/sqrt(var+eps) + beta`; after the forward, `running_mean = (1-momentum)*running_mean + "
       "momentum*mean`, `running_var = (1-momentum)*running_var + momentum*var*M/(M-1)` (PyTorch). Evaluation: `y = "
       "gamma*(x-running_mean)/sqrt(running_var+eps) + beta`, no update. The running statistics are parameters "
       "**without** `MLPH_PARAM_TRAINABLE`: state the backend updates, readable and writable with "
       "`read_parameter`/`write_parameter` (how ranks average them per epoch). `group_size`: in training, mean and "
       "var are over the batches of the `group_size` consecutive ranks `rank / group_size` (SyncBatchNorm; M "
       "counts every rank's values), and the input gradient uses the group's sums of dy and dy·x̂; gamma's and "
       "beta's gradients stay this rank's own (the usual gradient averaging follows). Needs a comms handle with "
       "`split` whose rank count `group_size` divides"},
      {"add", {{"a"}, {"b", "same shape"}}, "same", {}, ShapeRule::elementwise, true, "`y = a + b`"},
      {"concat", {{"x", "[N,S..,Ci]", kF32, Arity::variadic}}, "`[N,S..,sum Ci]`", {}, ShapeRule::concat, true,
       "along the channel (last) axis, inputs in order; same N and S"},
      {"global_avg_pool", {{"x", "[N,S..,C]"}}, "`[N,1..,C]` (spatial dims kept, size 1)", {},
       ShapeRule::global_pool, true, "mean over all spatial positions"},
      {"broadcast", {{"x", "[N,1..,C]"}}, "`[N,S..,C]`",
       {{"shape", AttrType::integers, Count::output_rank, at_least(1), output_shape(), "full output shape"}},
       ShapeRule::broadcast, true,
       "every size-1 spatial dim repeated (the reference's `tile` of the ASPP pooling branch); backward sums"},
      {"channel_affine", {{"x", "[N,S..,C]"}, {"w", "[C]"}, {"b", "[C]"}}, "same", {}, ShapeRule::per_channel, true,
       "`y = x*w[c] + b[c]` (DeepCAM's `TrainableAffine`)"},
      {"shift_scale", {{"x", "[N,S..,C]"}, {"shift", "[C]"}, {"scale", "[C]"}}, "same", {}, ShapeRule::per_channel,
       false,
       "`y = (x - shift[c]) * scale[c]` in float32 (min/max normalization: shift = min, scale = 1/(max-min)); "
       "preprocessing"},
      {"softmax_cross_entropy", {{"logits", "[N,S..,C]"}, {"labels", "[N,S..]", kI32}}, "scalar",
       {{"class_weights", AttrType::numbers, Count::channels, any_number(), fill(1), "used as float32"}},
       ShapeRule::segmentation_loss, true,
       "`loss = (1/P) * sum_p w[label_p] * (logsumexp(logits_p) - logits_p[label_p])`, P = N × spatial positions: "
       "a plain mean of weighted per-pixel losses (the DeepCAM reference, not PyTorch's weight-normalized mean). "
       "Labels must lie in [0, C); workloads validate them on read. Gradient to logits only"},
      {"iou", {{"logits", "[N,S..,C]"}, {"labels", "[N,S..]", kI32}}, "`[N]`", {}, ShapeRule::segmentation_metric,
       false,
       "per sample: `pred = argmax_c logits` (lowest class on ties); `iou = sum_c (tp+fp+fn == 0 ? 1/C : "
       "tp/((tp+fp+fn)*C))` in float32; evaluation output"},
      {"halo_exchange", {{"x", "[N,S..,C]"}}, "`[N,S+before+after..,C]`",
       {detail::grid(),
        {"halo", AttrType::integers, Count::spatial_or_twice, at_least(0), required(),
         "cells added before and after each spatial dim: the padding of the conv that follows, which then pads "
         "nothing (one per dim = both sides, or all befores then all afters)"}},
       ShapeRule::halo, true,
       "spatial parallelism (ABI 1.5): `x` is this rank's block of a whole `[N,S*grid..,C]` split evenly over "
       "`grid`; `y` is `x` with `halo` cells around it, taken from the neighbouring blocks (edges and corners "
       "included; comms `halo_exchange`) and zero past the ends of the whole, so that a conv with padding 0 on "
       "`y` gives this block of the conv with padding `halo` on the whole. Backward: the halos' gradients go back "
       "to the ranks holding those cells and are added there (comms `halo_accumulate`). A block must be at least "
       "as wide as a split dim's halo. `grid` all 1: zero padding, no comms; else a comms handle with `split`, "
       "`halo_exchange` and `halo_accumulate` whose rank count `prod(grid)` divides",
       2},
      {"spatial_gather", {{"x", "[N,S..,C]"}}, "`[N,S*grid..,C]`", {detail::grid()}, ShapeRule::gather, true,
       "spatial parallelism (ABI 1.5): the blocks of the sample's `prod(grid)` ranks (see `halo_exchange`) put "
       "together: every one of them gets the whole, and what follows runs alike on each. Backward: the sum over "
       "those ranks of the output's gradient, this rank's block (the ops after the gather run on every rank of the "
       "sample, so the blocks before it receive `prod(grid)` times their share: the usual average of the parameters' "
       "gradients over all ranks then gives each the mean over the sample groups of its whole-sample gradient, with "
       "no other reduction). `grid` all 1: the identity",
       2},
  };
  return table;
}

inline const std::vector<Optimizer>& optimizers() {
  using detail::number;
  // Every Adam-family hyperparameter is required: PyTorch's, apex's and Keras' defaults differ.
  auto adam_family = [](bool lamb) {
    std::vector<Attribute> attrs = {number("beta1", half_open(0, 1), required()),
                                    number("beta2", half_open(0, 1), required()), number("eps", above(0), required()),
                                    number("weight_decay", at_least(0), required())};
    if (lamb) attrs.push_back(number("max_grad_norm", above(0), required()));
    return attrs;
  };
  static const std::vector<Optimizer> table = {
      {"sgd_keras", {number("momentum", at_least(0), fill(0))}, {"velocity"}},
      {"adam", adam_family(false), {"m", "v"}},
      {"adamw", adam_family(false), {"m", "v"}},
      {"lamb", adam_family(true), {"m", "v"}},
  };
  return table;
}

// The catalogue entry of `name`, or null.
inline const Op* find_op(std::string_view name) {
  for (const Op& op : ops())
    if (name == op.name) return &op;
  return nullptr;
}
inline const Optimizer* find_optimizer(std::string_view name) {
  for (const Optimizer& o : optimizers())
    if (name == o.name) return &o;
  return nullptr;
}

}  // namespace mlph::sdk::schema

namespace mlph::sdk {

// The ops and optimizers a backend implements, by their catalogue names: what validate_graph
// (validate.hpp) checks a graph against.
struct Implements {
  std::vector<std::string> ops, optimizers;

  // Every op and optimizer of the catalogue.
  static Implements everything() {
    Implements all;
    for (const schema::Op& op : schema::ops()) all.ops.push_back(op.name);
    for (const schema::Optimizer& o : schema::optimizers()) all.optimizers.push_back(o.name);
    return all;
  }
  bool op(std::string_view name) const { return std::find(ops.begin(), ops.end(), name) != ops.end(); }
  bool optimizer(std::string_view name) const {
    return std::find(optimizers.begin(), optimizers.end(), name) != optimizers.end();
  }
};

}  // namespace mlph::sdk
