// The onednn-cpu executor's building blocks: graph values living in oneDNN memory (each in the
// layout its producer chose), primitives bound to their arguments once at compile time, and the
// two helpers every op uses at a layout boundary: a plain (channels-last) view of a value, and a
// gradient sink that writes or accumulates into a value's gradient whatever layout it comes in.
#pragma once

#include <cstdint>
#include <dnnl.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mlph/graph.h"
#include "mlph/sdk/graph/validate.hpp"

namespace mlph::onednn {

using dnnl::memory;
using Tag = memory::format_tag;
using Dims = memory::dims;

struct Value {
  std::string name;
  MLPH_DType dtype = MLPH_DTYPE_F32;
  std::vector<int64_t> shape;
  bool is_param = false;
  memory::desc plain;  // the graph's layout: channels-last activations, row-major parameters
  memory mem;          // the data, in the layout its producer chose (empty until defined)
  memory grad;         // same layout as `mem`; empty when no gradient flows into the value
  bool grad_written = false;  // during backward: has a contribution arrived yet?
  int64_t numel() const;
};

// A primitive with its arguments, bound at compile time.
struct Step {
  dnnl::primitive primitive;
  std::unordered_map<int, memory> args;
  void operator()(dnnl::stream& s) const { primitive.execute(s, args); }
};

// One buffer shared by every primitive's scratch space (user-managed scratchpad mode).
class Scratchpad {
 public:
  memory bind(const dnnl::engine& engine, const memory::desc& desc);
  void allocate(const dnnl::engine& engine);  // after compile: sizes the buffer, points every binding at it

 private:
  std::vector<memory> bound_;
  size_t size_ = 0;
  memory buffer_;
};

class Net {
 public:
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<Value> values;
  Scratchpad scratchpad;
  // Mixed precision: conv and conv_transpose compute in bf16 (bf16 copies of the fp32 master
  // weights, and of any fp32 source or output gradient they read).
  bool bf16_convolutions = false;
  // Which values are stored in bf16 between ops, their gradients too (model.cpp's plan under
  // precision bf16: activations that only bf16-capable ops write and read); all others are fp32.
  std::vector<bool> bf16_storage;
  // Convolutions with fewer input channels than this (and one group) run on inputs and weights
  // zero-padded to it inside the op (AMX's bf16 kernels want whole channel blocks); 0: never.
  int64_t pad_input_channels = 0;
  std::vector<std::string> conv_rewrites;  // "where(): how" of each conv run otherwise than as written (for tests)

  Value& at(int32_t v) { return values[static_cast<size_t>(v)]; }
  memory::data_type stored_type(int32_t v) const {
    const auto i = static_cast<size_t>(v);
    return i < bf16_storage.size() && bf16_storage[i] ? memory::data_type::bf16 : memory::data_type::f32;
  }
  // `desc` in the element type value v is stored in (an op choosing v's layout).
  memory::desc stored(int32_t v, const memory::desc& desc) const;
  // Value v as an op computing in `type` reads it: itself, or a copy that `steps` refreshes.
  memory as_type(int32_t v, memory::data_type type, std::vector<Step>& steps);
  // Gives `v` its layout: allocates its data (or adopts `alias`) and its gradient when it needs one.
  void define(int32_t v, const memory::desc& desc, std::optional<memory> alias = std::nullopt);
  // Which values receive a gradient, and from how many ops (more than one: contributions add up).
  void set_gradient_flow(std::vector<bool> needed, std::vector<int> contributors) {
    needs_grad_ = std::move(needed), contributors_ = std::move(contributors);
  }
  bool needs_grad(int32_t v) const { return needs_grad_[static_cast<size_t>(v)]; }
  int contributors(int32_t v) const { return contributors_[static_cast<size_t>(v)]; }

  // Attributes every primitive gets: the user-managed scratchpad.
  dnnl::primitive_attr attr() const;
  template <class Primitive>
  Step step(const typename Primitive::primitive_desc& pd, std::unordered_map<int, memory> args) {
    if (pd.scratchpad_desc().get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = scratchpad.bind(engine, pd.scratchpad_desc());
    return {Primitive(pd), std::move(args)};
  }
  // A reorder from `from` to `to` (their own descs: layouts, types, views), with `with` (e.g. a sum).
  Step reorder(const memory& from, const memory& to, const dnnl::primitive_attr& with);
  Step reorder(const memory& from, const memory& to) { return reorder(from, to, attr()); }
  // `src` in layout `want`: itself when it already is, else a new memory that `steps` refreshes.
  memory convert(const memory& src, const memory::desc& want, std::vector<Step>& steps);
  // The plain (graph-layout) form of value v, refreshed by `steps` when v lives in another layout.
  memory plain(int32_t v, std::vector<Step>& steps) { return convert(at(v).mem, at(v).plain, steps); }
  // `small` at the start of a zeroed buffer in layout `big` (same rank, dims at least small's in
  // dim 1, a plain or strided layout): the buffer, whose leading part `steps` refreshes from
  // `small`; the rest stays zero. With `taps` > 1, `taps` copies of small side by side in dim 1,
  // copy t shifted along the last dim: big[:, t * C + c, ..., p] = small[:, c, ..., p + t - pad]
  // where that lies inside small (a conv's taps along its last axis folded into its channels).
  memory embed(const memory& small, const memory::desc& big, std::vector<Step>& steps, int64_t taps = 1,
               int64_t pad = 0);
  // The leading `dims` of `big` (plain or strided), as a memory over the same buffer.
  memory part(const memory& big, const Dims& dims) {
    return memory(big.get_desc().submemory_desc(dims, Dims(dims.size(), 0)), engine, big.get_data_handle());
  }
  // A parameter's buffer seen through `desc` (an op's logical view of the graph layout).
  memory view(const memory& m, const memory::desc& desc) { return memory(desc, engine, m.get_data_handle()); }
  // Makes sure grad(v) holds something before a backward step reads it (zero if nothing arrived).
  void ready_grad(int32_t v);
  void run(const std::vector<Step>& steps) {
    for (const Step& s : steps) s(stream);
  }

 private:
  std::vector<bool> needs_grad_;
  std::vector<int> contributors_;
};

// Writes one contribution to the gradient of value v: the first overwrites, later ones add, so
// that a value used by several ops sums their gradients. The contribution comes in layout
// `writer` (written into target(), or an existing memory given as `source`); `grad_view`
// reinterprets the gradient buffer for ops that see a parameter through another logical shape.
class GradSink {
 public:
  GradSink() = default;
  GradSink(Net& net, int32_t v, const memory::desc& writer, std::optional<memory> source = std::nullopt,
           std::optional<memory::desc> grad_view = std::nullopt);
  explicit operator bool() const { return net_ != nullptr; }
  memory target();  // where the contribution goes; call commit() after writing it
  void commit();

 private:
  Net* net_ = nullptr;
  int32_t v_ = -1;
  memory grad_, source_;
  bool same_layout_ = false, direct_ = false;
  std::optional<Step> overwrite_, accumulate_;
};

// What ops see of a node during compile: the validator's checked node (attributes typed, defaults
// filled in, shapes consistent).
struct NodeView {
  const sdk::ValidNode* node;
  std::string where() const { return node->where(); }  // "node 'name' (op)"
  int32_t in(size_t i) const { return node->inputs[i]; }
  int32_t out() const { return node->output; }
  size_t n_in() const { return node->inputs.size(); }
  const sdk::AttrValues& attrs() const { return node->attrs; }
};

struct RunArgs {
  bool training = false;
  uint64_t step = 0;
  uint64_t seed = 0;
};

class Op {
 public:
  explicit Op(const NodeView& n) : where_(n.where()), output_(n.out()) {}
  virtual ~Op() = default;
  virtual void forward(const RunArgs& args) = 0;
  virtual void backward() {}  // runs only when the output has a gradient, which is then ready
  const std::string& where() const { return where_; }
  int32_t output() const { return output_; }

 private:
  std::string where_;
  int32_t output_;
};

// The graph's row-major layout as oneDNN sees it: rank 4 and 5 are [N, S..., C] channels-last
// (oneDNN's logical dims N, C, S...), whether activation or parameter (a trainable input, as in
// mlperf-bench --layers: same bytes); conv weights are viewed through their own descs instead.
// Anything else is row-major over its own shape.
memory::desc plain_desc(const std::vector<int64_t>& shape, MLPH_DType dtype);
// `desc` with another element type, same dims and layout (oneDNN 2.x has no accessor for it).
memory::desc retyped(const memory::desc& desc, memory::data_type type);
inline memory::data_type type_of(const memory::desc& desc) { return static_cast<memory::data_type>(desc.data.data_type); }
// Runs f(begin, end) over [0, n) on the OpenMP threads.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& f);

}  // namespace mlph::onednn
