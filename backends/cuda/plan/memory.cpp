#include "memory.hpp"

#include <algorithm>
#include <climits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

namespace mlph::cuda::plan {
namespace {

constexpr size_t kFloatsPerAlignment = kAlignment / sizeof(float);

// What a node's backward reads besides the output's gradient: input slots (a bit set) and its output.
struct Saves {
  unsigned inputs = 0;
  bool output = false;
};

Saves saved_by_backward(const Node& node) {
  switch (node.kind) {
    case OpKind::conv:
    case OpKind::conv_transpose:
    case OpKind::dense:
    case OpKind::batch_norm:
    case OpKind::channel_affine:
    case OpKind::max_pool:
      return {1u, false};
    case OpKind::mse:
    case OpKind::softmax_cross_entropy:
      return {0b11u, false};
    case OpKind::relu:  // y > 0 exactly where x > 0
    case OpKind::tanh:  // 1 - y^2
      return {0, true};
    case OpKind::leaky_relu:  // with alpha >= 0, y > 0 exactly where x > 0
      return node.attr >= 0 ? Saves{0, true} : Saves{1u, false};
    default:
      return {};
  }
}

class Planner {
 public:
  Planner(const Program& p, const std::vector<NodeLowering>& lowering, const PrecisionPlan& precision,
          const Schedule& schedule, const Workspaces& workspaces)
      : p_(p), lowering_(lowering), precision_(precision), schedule_(schedule), workspaces_(workspaces),
        last_step_(static_cast<int>(schedule.steps.size()) - 1) {}

  MemoryPlan run() {
    find_roots_and_params();
    make_persistent();
    for (int32_t v : p_.inputs) touch(value_at(v), 0);
    for (size_t k = 0; k < p_.nodes.size(); ++k) forward(k);
    for (int32_t v : p_.eval_outputs) touch(value_at(v), last_step_);
    touch(value_at(p_.loss), last_step_);
    for (const Step& step : schedule_.steps)
      if (step.phase == Phase::backward) backward(static_cast<size_t>(step.node));
    update();
    out_.values.resize(p_.values.size());
    out_.value_gradients.resize(p_.values.size());
    std::vector<bool> unstored(p_.values.size(), false);  // a pool chain's activation: never in memory
    std::vector<bool> no_gradient(p_.values.size(), false);  // a fused relu's input: its gradient is never formed
    for (size_t k = 0; k < p_.nodes.size(); ++k) {
      if (lowering_[k].fused_into >= 0) unstored[static_cast<size_t>(p_.nodes[k].output)] = true;
      if (lowering_[k].fused_relu >= 0)  // written as the relu's output instead
        unstored[static_cast<size_t>(p_.nodes[k].output)] = no_gradient[static_cast<size_t>(p_.nodes[k].output)] = true;
    }
    for (size_t v = 0; v < p_.values.size(); ++v) {
      if (unstored[v]) continue;
      out_.values[v] = value_at(static_cast<int32_t>(v));
      if (p_.needs_gradient[v] && !no_gradient[v]) out_.value_gradients[v] = gradient_at(static_cast<int32_t>(v));
    }
    place();
    return std::move(out_);
  }

 private:
  // ---- regions and their lives ----

  int32_t add_region(RegionKind kind, std::string name, size_t bytes) {
    out_.regions.push_back({kind, std::move(name), align_up(std::max<size_t>(bytes, 1), kAlignment), INT_MAX, -1, 0});
    return static_cast<int32_t>(out_.regions.size() - 1);
  }
  int32_t persistent(RegionKind kind, std::string name, size_t bytes) {
    const int32_t r = add_region(kind, std::move(name), bytes);
    touch({r, 0}, 0), touch({r, 0}, last_step_);
    return r;
  }
  void touch(const Location& at, int step) {
    if (!at) return;
    Region& r = out_.regions[static_cast<size_t>(at.region)];
    r.first = std::min(r.first, step), r.last = std::max(r.last, step);
  }
  // One region per key (a value's, its cast's, its gradient's), made at first use.
  Location keyed(std::map<std::pair<int32_t, int>, int32_t>& regions, std::pair<int32_t, int> key, RegionKind kind,
                 const std::string& name, size_t bytes) {
    auto it = regions.find(key);
    if (it == regions.end()) it = regions.emplace(key, add_region(kind, name, bytes)).first;
    return {it->second, 0};
  }

  // ---- where things are ----

  void find_roots_and_params() {
    root_.resize(p_.values.size());
    std::iota(root_.begin(), root_.end(), 0);
    for (size_t k = 0; k < p_.nodes.size(); ++k)
      if (lowering_[k].engine == Engine::alias) root_[static_cast<size_t>(p_.nodes[k].output)] = root(p_.nodes[k].inputs[0]);
    param_of_.assign(p_.values.size(), -1);
    for (size_t i = 0; i < p_.params.size(); ++i) param_of_[static_cast<size_t>(p_.params[i].value)] = static_cast<int32_t>(i);
  }
  int32_t root(int32_t v) const { return root_[static_cast<size_t>(v)]; }
  size_t numel(int32_t v) const { return static_cast<size_t>(p_.value(v).numel()); }
  DType stored(int32_t v) const { return precision_.values[static_cast<size_t>(v)]; }
  const ParamSlot* param_slot(int32_t v) const {
    const int32_t i = param_of_[static_cast<size_t>(root(v))];
    return i < 0 ? nullptr : &out_.params.params[static_cast<size_t>(i)];
  }

  Location value_at(int32_t v) {
    if (const ParamSlot* slot = param_slot(v)) return {slot->trainable ? out_.masters : out_.state, slot->offset * sizeof(float)};
    const int32_t r = root(v);
    return keyed(values_, {r, 0}, RegionKind::value, p_.value(r).name, numel(r) * bytes_of(stored(r)));
  }
  Location gradient_at(int32_t v) {
    if (const ParamSlot* slot = param_slot(v)) return {out_.gradients, slot->offset * sizeof(float)};
    const int32_t r = root(v);
    return keyed(gradients_, {r, 0}, RegionKind::gradient, "d " + p_.value(r).name, numel(r) * bytes_of(stored(r)));
  }
  // Where node `k` reads input `slot` in forward (and backward, when it keeps it).
  Location read_at(size_t k, size_t slot) {
    const Node& node = p_.nodes[k];
    const int32_t v = node.inputs[slot];
    if (is_weight_slot(node, slot)) {
      const Location& copy = out_.weights[static_cast<size_t>(v)];
      return copy ? copy : value_at(v);
    }
    const DType type = precision_.nodes[k].reads[slot];
    if (type == stored(v)) return value_at(v);
    const int32_t r = root(v);
    if (padded_side(k, slot))  // a cast of its own, into ConvPlan::padded_channels
      return keyed(casts_, {r, kPaddedCast + static_cast<int>(type)}, RegionKind::cast,
                   p_.value(r).name + " as " + name_of(type) + ", channels padded", padded_count(k, slot, v) * bytes_of(type));
    return keyed(casts_, {r, static_cast<int>(type)}, RegionKind::cast, p_.value(r).name + " as " + name_of(type),
                 numel(r) * bytes_of(type));
  }
  // Padded channels (ConvPlan::channels): is input `slot` (-1: the output) of node k the padded side, and
  // how many elements has `v` there.
  bool padded_side(size_t k, int slot) const {
    const auto& conv = lowering_[k].conv;
    if (!conv || conv->channels == 0) return false;
    return slot == 1 || slot == (conv->transpose ? -1 : 0);
  }
  size_t padded_count(size_t k, int slot, int32_t v) const {
    const ConvPlan& c = *lowering_[k].conv;
    if (slot != 1) return static_cast<size_t>(c.in.dims[0] * c.in.strides[0]);  // the padded side as cuDNN sees it
    return numel(v) / static_cast<size_t>(c.channels) * static_cast<size_t>(c.padded_channels);
  }
  size_t count_on_side(size_t k, int slot, int32_t v) const { return padded_side(k, slot) ? padded_count(k, slot, v) : numel(v); }
  static constexpr int kPaddedCast = 100;  // a padded cast's key: apart from the plain casts of the same value
  const Node& fused_relu_node(size_t k) const { return p_.nodes[static_cast<size_t>(lowering_[k].fused_relu)]; }
  // A region of node `k` alone (at its steps).
  Location scratch(RegionKind kind, size_t k, const std::string& what, size_t bytes) {
    return {add_region(kind, p_.nodes[k].name + " " + what, bytes), 0};
  }

  void make_persistent() {
    out_.params = layout_params(p_);
    const size_t trainable = out_.params.trainable_floats * sizeof(float);
    out_.masters = persistent(RegionKind::masters, "master weights", trainable);
    out_.state = persistent(RegionKind::state, "state parameters", out_.params.state_floats * sizeof(float));
    out_.gradients = persistent(RegionKind::gradients, "gradients", trainable);
    for (const std::string& slot : p_.optimizer.state)
      out_.optimizer_slots.push_back(persistent(RegionKind::optimizer_slot, "optimizer " + slot, trainable));
    if (precision_.loss_scaling) persistent(RegionKind::loss_scale, "loss scale", 2 * sizeof(float));
    // The device's weight copies, in half types only: the masters are in the layout their reader
    // reads (weights.hpp), so fp32 and tf32 read them as they are.
    out_.weights.resize(p_.values.size());
    const bool half = compute_dtype(precision_.precision) != DType::f32;
    for (size_t k = 0; k < p_.nodes.size(); ++k) {
      const Node& node = p_.nodes[k];
      if (!(lowering_[k].conv || lowering_[k].dense) || !half) continue;
      const auto w = static_cast<size_t>(node.inputs[1]);
      if (out_.weights[w]) continue;
      out_.weights[w] = {persistent(RegionKind::weights, p_.values[w].name + " (device)",
                                    count_on_side(k, 1, node.inputs[1]) * bytes_of(precision_.nodes[k].data)), 0};
    }
  }

  // ---- the steps ----

  void forward(size_t k) {
    const Node& node = p_.nodes[k];
    NodeMemory& m = node_memory(k);
    if (lowering_[k].fused_into >= 0) return;  // inside a pool chain: nothing of its own
    if (lowering_[k].engine == Engine::pool_chain) return chain_forward(k);
    if (lowering_[k].engine == Engine::fused) {  // a relu its producer writes: its output, read by later nodes
      m.output = value_at(node.output);
      return;
    }
    const bool fused = lowering_[k].fused_relu >= 0;  // writes the relu's output, never its own
    m.output = fused ? Location{} : value_at(node.output);
    for (size_t i = 0; i < node.inputs.size(); ++i) m.reads.push_back(read_at(k, i));
    m.makes_cast.assign(node.inputs.size(), false);
    if (lowering_[k].engine == Engine::alias) return;  // no step of its own
    const int s = schedule_.forward[k];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const Region& read = out_.regions[static_cast<size_t>(m.reads[i].region)];
      if (read.kind == RegionKind::cast && read.last < 0) {  // made here, from the value
        m.makes_cast[i] = true;
        touch(value_at(node.inputs[i]), s);
      }
      touch(m.reads[i], s);
    }
    touch(m.output, s);
    const auto& conv = lowering_[k].conv;
    const bool crops_output = conv && conv->transpose && conv->explicit_padding;  // from the padded buffer, casting
    const DType writes = precision_.nodes[k].writes;
    if (writes != stored(node.output) && !crops_output) {
      m.output_scratch = scratch(RegionKind::output_scratch, k, std::string("output as ") + name_of(writes),
                                 count_on_side(k, -1, node.output) * bytes_of(writes));
      touch(m.output_scratch, s);
    }
    if (node.kind == OpKind::batch_norm) {  // mean, inverse std (and scale, shift for a fused relu's mask)
      const int64_t floats = (lowering_[k].fused_relu >= 0 ? 4 : 2) * node.rows.channels;
      m.statistics = scratch(RegionKind::statistics, k, "saved statistics", static_cast<size_t>(floats) * sizeof(float));
      touch(m.statistics, s);
    }
    if (lowering_[k].fused_relu >= 0) touch(value_at(fused_relu_node(k).output), s);  // written here
    if (conv && conv->explicit_padding) {
      m.padded = scratch(RegionKind::padded, k, "padded", padded_bytes(k));
      touch(m.padded, s);
    }
    m.forward_workspace = workspace(k, workspaces_.forward, "forward workspace", s);
  }

  // A pool chain (lowering.hpp): reads[0] is the conv's output z, read again in backward; the winners
  // live from forward to backward; gradients[0] is z's gradient, which the chain writes first (and
  // alone: z and the activation have no other reader).
  int32_t chain_input(size_t k) const { return p_.nodes[static_cast<size_t>(lowering_[k].chain_conv)].output; }
  void chain_forward(size_t k) {
    const Node& node = p_.nodes[k];
    NodeMemory& m = node_memory(k);
    const int s = schedule_.forward[k];
    m.output = value_at(node.output);
    m.reads = {value_at(chain_input(k))};
    m.makes_cast = {false};
    m.winners = scratch(RegionKind::winners, k, "pool winners", numel(node.output));
    for (const Location& at : {m.output, m.reads[0], m.winners}) touch(at, s);
  }
  void chain_backward(size_t k) {
    const Node& node = p_.nodes[k];
    NodeMemory& m = node_memory(k);
    const int s = schedule_.backward[k];
    const int32_t z = chain_input(k);
    m.output_gradient = gradient_at(node.output);
    for (const Location& at : {m.output_gradient, m.reads[0], m.winners}) touch(at, s);
    m.gradients.resize(1), m.gradient_scratch.resize(1), m.accumulate.resize(1);
    if (!p_.needs_gradient[static_cast<size_t>(z)]) return;
    m.gradients[0] = gradient_at(z);
    touch(m.gradients[0], s);
    m.accumulate[0] = !written_.insert(root(z)).second;  // false: the chain is z's only reader
  }

  void backward(size_t k) {
    const Node& node = p_.nodes[k];
    NodeMemory& m = node_memory(k);
    if (lowering_[k].engine == Engine::pool_chain) return chain_backward(k);
    const int s = schedule_.backward[k];
    const Saves saves = saved_by_backward(node);
    const auto& conv = lowering_[k].conv;
    const bool explicit_padding = conv && conv->explicit_padding;
    const bool pads_input = explicit_padding && !conv->transpose;  // conv: x is kept (and dx made) padded
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (saves.inputs >> i & 1u) touch(pads_input && i == 0 ? m.padded : m.reads[i], s);
    if (saves.output) touch(m.output, s);
    touch(m.statistics, s);
    if (lowering_[k].fused_relu < 0) {
      m.output_gradient = gradient_at(node.output);
      touch(m.output_gradient, s);
    } else {  // the fused relu's output gradient is what this backward reads (its own output's has none)
      NodeMemory& relu = node_memory(static_cast<size_t>(lowering_[k].fused_relu));
      relu.output_gradient = gradient_at(fused_relu_node(k).output);
      touch(relu.output_gradient, s);
      if (node.kind == OpKind::add) touch(value_at(fused_relu_node(k).output), s);  // and add its mask
    }
    // The library reads dy in its type: cast down first (conv_transpose's explicit padding pads and casts at once).
    const DType data = precision_.nodes[k].data;
    if (lowering_[k].engine != Engine::kernel && data != stored(node.output) && !(explicit_padding && conv->transpose)) {
      m.output_gradient_cast = scratch(RegionKind::gradient_cast, k, std::string("d output as ") + name_of(data),
                                       count_on_side(k, -1, node.output) * bytes_of(data));
      touch(m.output_gradient_cast, s);
    }
    if (explicit_padding) {  // conv: d(padded x), cropped into dx; conv_transpose: dy padded
      m.padded_gradient = scratch(RegionKind::padded_gradient, k, "padded gradient", padded_bytes(k));
      touch(m.padded_gradient, s);
    }
    m.gradients.resize(node.inputs.size());
    m.gradient_scratch.resize(node.inputs.size());
    m.accumulate.resize(node.inputs.size());
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int32_t v = node.inputs[i];
      if (!p_.needs_gradient[static_cast<size_t>(v)]) continue;
      m.gradients[i] = gradient_at(v);
      touch(m.gradients[i], s);
      m.accumulate[i] = param_slot(v) || !written_.insert(root(v)).second;
      if (is_weight_slot(node, i)) {
        if (conv && precision_.nodes[k].data != DType::f32)  // cuDNN writes dw in the half type: cast and added after
          m.weight_gradient = scratch(RegionKind::weight_gradient, k, "weight gradient",
                                      count_on_side(k, 1, v) * bytes_of(precision_.nodes[k].reads[i]));
        touch(m.weight_gradient, s);
        continue;
      }
      // cuBLASLt writes dx as D of its own gemm, in the gradient's stored type (model_compile.cpp).
      const bool as_stored = precision_.nodes[k].reads[i] == stored(v) || lowering_[k].engine == Engine::cublaslt_dense;
      const DType type = as_stored ? stored(v) : precision_.nodes[k].writes;
      if (type != stored(v) && !(pads_input && i == 0)) {  // the crop casts
        m.gradient_scratch[i] = scratch(RegionKind::gradient_scratch, k, "d input " + std::to_string(i) + " as " + name_of(type),
                                        numel(v) * bytes_of(type));
        touch(m.gradient_scratch[i], s);
      }
    }
    m.backward_workspace = workspace(k, workspaces_.backward, "backward workspace", s);
  }

  void update() {
    const int s = schedule_.update;
    if (p_.optimizer.kind == sdk::program::OptimizerKind::lamb && out_.params.trainable_floats > 0) {
      out_.lamb_update = {add_region(RegionKind::optimizer_scratch, "lamb update", out_.params.trainable_floats * sizeof(float)), 0};
      touch(out_.lamb_update, s);
    }
    if (workspaces_.update > 0) {
      out_.update_workspace = {add_region(RegionKind::workspace, "update workspace", workspaces_.update), 0};
      touch(out_.update_workspace, s);
    }
  }

  size_t padded_bytes(size_t k) const {
    const TensorDesc& t = lowering_[k].conv->padded;
    size_t count = 1;
    for (int d = 0; d < t.rank; ++d) count *= static_cast<size_t>(t.dims[static_cast<size_t>(d)]);
    return count * bytes_of(precision_.nodes[k].data);
  }

  Location workspace(size_t k, const std::vector<size_t>& bytes, const char* what, int step) {
    if (k >= bytes.size() || bytes[k] == 0) return {};
    const Location at = scratch(RegionKind::workspace, k, what, bytes[k]);
    touch(at, step);
    return at;
  }

  NodeMemory& node_memory(size_t k) {
    if (out_.nodes.size() < p_.nodes.size()) out_.nodes.resize(p_.nodes.size());
    return out_.nodes[k];
  }

  // ---- placement ----

  // Greedy by size (largest first), each at the lowest offset clear of every placed region whose
  // life overlaps its own. Ties in size go by first step, then creation: the same plan on every rank.
  void place() {
    std::vector<size_t> order(out_.regions.size());
    std::iota(order.begin(), order.end(), size_t{0});
    auto& regions = out_.regions;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return regions[a].bytes != regions[b].bytes ? regions[a].bytes > regions[b].bytes : regions[a].first < regions[b].first;
    });
    std::vector<size_t> placed;
    for (size_t r : order) {
      Region& region = regions[r];
      std::vector<const Region*> overlapping;
      for (size_t q : placed)
        if (regions[q].first <= region.last && region.first <= regions[q].last) overlapping.push_back(&regions[q]);
      std::sort(overlapping.begin(), overlapping.end(), [](const Region* a, const Region* b) { return a->offset < b->offset; });
      size_t offset = 0;
      for (const Region* q : overlapping) {
        if (offset + region.bytes <= q->offset) break;
        offset = std::max(offset, q->offset + q->bytes);
      }
      region.offset = offset;
      out_.arena_bytes = std::max(out_.arena_bytes, offset + region.bytes);
      placed.push_back(r);
    }
    for (int s = 0; s <= last_step_; ++s) {
      size_t live = 0;
      for (const Region& region : regions) live += region.live_at(s) ? region.bytes : 0;
      if (live > out_.live_bytes_peak) out_.live_bytes_peak = live, out_.peak_step = s;
    }
  }

  const Program& p_;
  const std::vector<NodeLowering>& lowering_;
  const PrecisionPlan& precision_;
  const Schedule& schedule_;
  const Workspaces& workspaces_;
  const int last_step_;
  MemoryPlan out_;
  std::vector<int32_t> root_, param_of_;
  std::map<std::pair<int32_t, int>, int32_t> values_, casts_, gradients_;
  std::set<int32_t> written_;  // values whose gradient a backward step wrote already
};

}  // namespace

bool runs_backward(const Program& p, const NodeLowering& lowering, const Node& node) {
  return node.gradient && lowering.engine != Engine::alias && lowering.engine != Engine::fused &&
         p.needs_gradient[static_cast<size_t>(node.output)];
}

Schedule plan_schedule(const Program& p, const std::vector<NodeLowering>& lowering) {
  Schedule s;
  s.backward.assign(p.nodes.size(), -1);
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    s.forward.push_back(static_cast<int>(s.steps.size()));
    s.steps.push_back({Phase::forward, static_cast<int32_t>(k)});
  }
  for (size_t k = p.nodes.size(); k-- > 0;) {
    if (!runs_backward(p, lowering[k], p.nodes[k])) continue;
    s.backward[k] = static_cast<int>(s.steps.size());
    s.steps.push_back({Phase::backward, static_cast<int32_t>(k)});
  }
  s.update = static_cast<int>(s.steps.size());
  s.steps.push_back({Phase::update, -1});
  return s;
}

namespace {
// Whether a max-pool's windows tile its input and leave no element out (kernels/pool.hpp's
// pool_windows_cover, without its header: the plan includes no kernel header).
bool pool_windows_cover(const sdk::program::Window& w) {
  for (int d = 0; d < 3; ++d)
    if (w.kernel[d] != w.stride[d] || w.out[d] * w.kernel[d] != w.in[d]) return false;
  return true;
}
}  // namespace

bool first_writer_overwrites(const Node& node, const NodeLowering& l, const NodeMemory& m, size_t i) {
  if (i >= m.gradients.size() || !m.gradients[i] || m.accumulate[i]) return false;
  if (l.engine == Engine::cudnn_conv || l.engine == Engine::cudnn_conv_transpose)
    // beta 0 into dx, or into its scratch (a half type: then cast over dx, convert_add's `accumulate`
    // false). Not a conv's explicitly padded x: its gradient is cropped out of d(padded x) and added.
    return i == 0 && l.conv && !(l.conv->explicit_padding && !l.conv->transpose);
  if (i < m.gradient_scratch.size() && m.gradient_scratch[i]) return false;  // no body of ours casts it over dx
  switch (l.engine) {
    case Engine::cublaslt_dense:
    case Engine::depthwise:  // the gather starts from 0
    case Engine::pool_chain:  // dz written whole
      return i == 0;
    case Engine::kernel:
      switch (node.kind) {
        case OpKind::mse:  // `first` bits
          return true;
        case OpKind::softmax_cross_entropy:  // dlogits, 0 in a row whose label is bad
          return i == 0;
        case OpKind::relu:
        case OpKind::batch_norm:  // the data pass
          return i == 0;
        case OpKind::max_pool:  // windows that tile and cover x (kernels' pool_windows_cover)
          return i == 0 && pool_windows_cover(node.window);
        case OpKind::add:  // each input's copy of dy (or add_relu_backward's `first` bits)
          return true;
        case OpKind::concat:  // each input's band of dy (concat_backward's `first` bits: 64 of them)
          return i < 64;
        case OpKind::global_avg_pool:  // dy / positions at every element of x
        case OpKind::broadcast:        // each element of x: its repeats' sum, from 0
        case OpKind::channel_affine:   // dy * w (dw, db: fp32 parameter gradients, added)
        case OpKind::leaky_relu:
        case OpKind::tanh:
        case OpKind::scale:
        case OpKind::dropout:          // dy * mask, or dy (evaluation)
          return i == 0;
        default:
          return false;
      }
    default:
      return false;
  }
}

ParamLayout layout_params(const Program& p) {
  ParamLayout layout;
  for (const auto& param : p.params) {
    size_t& end = param.trainable ? layout.trainable_floats : layout.state_floats;
    const auto count = static_cast<size_t>(p.value(param.value).numel());
    layout.params.push_back({param.trainable, end, count});
    end = align_up(end + count, kFloatsPerAlignment);
  }
  return layout;
}

const char* name_of(RegionKind kind) {
  static const char* const names[] = {"master weights", "state parameters", "gradient buffer", "optimizer state",
                                      "device weights", "optimizer scratch", "loss scale", "values",
                                      "casts", "value gradients", "batch-norm statistics", "padded inputs",
                                      "padded gradients", "weight gradients", "gradient scratch", "workspaces",
                                      "output scratch", "gradient casts", "pool winners"};
  return names[static_cast<size_t>(kind)];
}

MemoryPlan plan_memory(const Program& p, const std::vector<NodeLowering>& lowering, const PrecisionPlan& precision,
                       const Schedule& schedule, const Workspaces& workspaces) {
  MemoryPlan plan = Planner(p, lowering, precision, schedule, workspaces).run();
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    NodeMemory& m = plan.nodes[k];
    m.zeroed.assign(m.gradients.size(), false);
    if (lowering[k].engine == Engine::fused || lowering[k].engine == Engine::alias) continue;  // no backward of their own
    for (size_t i = 0; i < m.gradients.size(); ++i)
      m.zeroed[i] = m.gradients[i] && !m.accumulate[i] && !first_writer_overwrites(p.nodes[k], lowering[k], m, i);
  }
  return plan;
}

std::string describe(const MemoryPlan& plan, const Schedule& schedule) {
  constexpr double kMiB = 1024.0 * 1024.0;
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  const Step& peak = schedule.steps[static_cast<size_t>(plan.peak_step)];
  out << "arena " << static_cast<double>(plan.arena_bytes) / kMiB << " MiB (" << plan.arena_bytes << " bytes), live peak "
      << static_cast<double>(plan.live_bytes_peak) / kMiB << " MiB at step " << plan.peak_step << " ("
      << (peak.phase == Phase::forward ? "forward" : peak.phase == Phase::backward ? "backward" : "update") << "), "
      << plan.regions.size() << " regions\n";
  std::map<RegionKind, size_t> by_kind;
  for (const Region& r : plan.regions)
    if (r.live_at(plan.peak_step)) by_kind[r.kind] += r.bytes;
  for (const auto& [kind, bytes] : by_kind)
    out << "  " << name_of(kind) << ": " << static_cast<double>(bytes) / kMiB << " MiB\n";
  return out.str();
}

}  // namespace mlph::cuda::plan
