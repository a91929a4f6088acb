// The cuda model's work per node: forward (training or evaluation) and backward, enqueued on the
// compute stream with the plan's memory (plan/memory.hpp NodeMemory) and the node's library objects.
// Backward accumulates into a gradient someone wrote before (our kernels, cuDNN and cuBLASLt with
// beta 1). Its first writer overwrites it where it can (plan::first_writer_overwrites: cuDNN's and
// cuBLASLt's dx with beta 0 or cast over it, our kernels' data gradients and the losses' with
// `accumulate` false, a pool chain's dz);
// the others add into it zeroed first (plan::NodeMemory::zeroed, zero_first_gradients). Scratch of the
// node's own (a half-type dx, cuDNN's dw, a padded gradient) is written with beta 0.
#include "model_impl.hpp"
#include "padded_input.hpp"

namespace mlph::cuda {
namespace {

using sdk::program::OpKind;

FloatType float_type(plan::DType type) {
  return type == plan::DType::bf16 ? FloatType::bf16 : type == plan::DType::f16 ? FloatType::f16 : FloatType::f32;
}

constexpr float kOne = 1.0f, kZero = 0.0f;

// backend.batch_norm=cudnn: the persistent spatial mode for training (cuDNN's faster path for NHWC;
// deterministic, its docs say, through scaled integer atomics that may overflow to Inf/NaN on extreme
// inputs). Inference stays CUDNN_BATCHNORM_SPATIAL. The *Ex entry points would need a reserve space
// from forward to backward in the memory plan: not used yet.
constexpr cudnnBatchNormMode_t kCudnnTrainingMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

// The box between a conv's unpadded input side `unpadded` and its padded buffer (plan::ConvPlan),
// spatial dims right-aligned into 3: into the padded buffer, or out of it.
Box padding_box(const plan::ConvPlan& c, bool into_padded) {
  const plan::TensorDesc& unpadded = c.in;
  Box b;
  b.batch = unpadded.dims[0], b.channels = unpadded.dims[1];
  const int first = 3 - c.spatial;
  for (int d = 0; d < c.spatial; ++d) {
    const auto e = static_cast<size_t>(first + d), i = static_cast<size_t>(d);
    const int64_t size = unpadded.dims[2 + i], padded = c.padded.dims[2 + i];
    b.extent[e] = c.copied[i];
    b.src[e] = into_padded ? size : padded;
    b.dst[e] = into_padded ? padded : size;
    (into_padded ? b.dst_offset : b.src_offset)[e] = c.offset[i];
  }
  return b;
}

}  // namespace

// f(T*{}) with T the stored type (float, or Bf16 / F16 for activations stored in bf16 / fp16:
// plan::PrecisionPlan), so that one call site, a lambda [&]<class T>(T*), picks our kernels' overload for it.
template <class F>
void CudaModel::check_stored(size_t k, FloatType stored, const char* call, F&& f) const {
  if (stored == FloatType::bf16) return check(f(static_cast<Bf16*>(nullptr)), call, k);
  if (stored == FloatType::f16) return check(f(static_cast<F16*>(nullptr)), call, k);
  check(f(static_cast<float*>(nullptr)), call, k);
}

void CudaModel::check(cudaError_t error, const char* call, size_t k) const {
  if (error != cudaSuccess) where_.fail(runtime::code_of(error), call, node_about(k), runtime::error_text(error));
  mark(call);
}

// ---- forward ----

void CudaModel::forward(size_t k, bool training) {
  if (plan_.nodes[k].engine == plan::Engine::fused) return;  // done by the node before it
  const sdk::program::Node& n = program_.nodes[k];
  const plan::NodeMemory& m = plan_.memory.nodes[k];
  const plan::NodePrecision& precision = plan_.precision.nodes[k];
  const NodeRuntime& r = nodes_[k];
  const cudaStream_t s = stream();
  const auto& conv = plan_.nodes[k].conv;
  for (size_t i = 0; i < n.inputs.size(); ++i) {  // the half copies this node is the first to read
    if (!m.makes_cast[i]) continue;
    const void* value = at(plan_.memory.values[static_cast<size_t>(n.inputs[i])]);
    if (i == 0 && conv && conv->channels && !conv->transpose)  // padded channels (plan::pad_channels)
      check(taps_fold(s, taps_fold_of(*conv, program_.value(n.inputs[0]).shape.end()[-2]), stored_type(n.inputs[0]), value,
                      float_type(precision.reads[0]), at(m.reads[0])),
            "taps_fold", k);
    else
      check(convert(s, numel(n.inputs[i]), stored_type(n.inputs[i]), value, float_type(precision.reads[i]), at(m.reads[i])),
            "convert", k);
  }
  auto in = [&](size_t i) { return at<float>(m.reads[i]); };
  float* y = at<float>(m.output);
  const int64_t count = numel(n.output), rows = n.rows.rows, channels = n.rows.channels;
  void* ws = at(m.forward_workspace);
  const size_t ws_bytes = m.forward_workspace ? plan_.memory.regions[static_cast<size_t>(m.forward_workspace.region)].bytes : 0;
  const auto alpha = static_cast<float>(n.attr);
  switch (n.kind) {
    case OpKind::log1p:
      if (program_.value(n.inputs[0]).dtype == MLPH_DTYPE_I16)
        check(log1p_forward(s, count, at<int16_t>(m.reads[0]), y), "log1p_forward", k);
      else
        check(log1p_forward(s, count, in(0), y), "log1p_forward", k);
      break;
    case OpKind::conv:
    case OpKind::conv_transpose:
      if (plan_.nodes[k].engine == plan::Engine::depthwise)  // our kernel: bias included, no cast, no copy
        check_stored(k, stored_type(n.inputs[0]), "depthwise_forward", [&]<class T>(T*) {
          return depthwise_forward(s, depthwise_shape(n.window, n.has_bias()), at<T>(m.reads[0]), in(1),
                                   n.has_bias() ? in(2) : nullptr, at<T>(m.output));
        });
      else if (r.dense)  // a pointwise conv on cuBLASLt (plan::is_pointwise)
        dense_forward(k);
      else
        conv_forward(k);
      break;
    case OpKind::leaky_relu:  // x and y in one stored type (and so tanh, scale, dropout)
      check_stored(k, stored_type(n.output), "leaky_relu_forward", [&]<class T>(T*) {
        return leaky_relu_forward(s, count, alpha, at<T>(m.reads[0]), at<T>(m.output));
      });
      break;
    case OpKind::relu:
      check_stored(k, stored_type(n.inputs[0]), "relu_forward",
                   [&]<class T>(T*) { return relu_forward(s, count, at<T>(m.reads[0]), at<T>(m.output)); });
      break;
    case OpKind::tanh:
      check_stored(k, stored_type(n.output), "tanh_forward",
                   [&]<class T>(T*) { return tanh_forward(s, count, at<T>(m.reads[0]), at<T>(m.output)); });
      break;
    case OpKind::scale:
      check_stored(k, stored_type(n.output), "scale_forward", [&]<class T>(T*) {
        return scale_forward(s, count, alpha, at<T>(m.reads[0]), at<T>(m.output));
      });
      break;
    case OpKind::max_pool:
      // x and y (a chain's z and y) in one stored type (plan::tied_values)
      if (plan_.nodes[k].engine == plan::Engine::pool_chain)  // bias + leaky ReLU + max-pool from the conv's output
        check_stored(k, stored_type(n.output), "pool_chain_forward", [&]<class T>(T*) {
          return pool_chain_forward(s, chain_shape(k), at<T>(m.reads[0]), chain_bias(k),
                                    at<T>(m.output), at<uint8_t>(m.winners));
        });
      else
        check_stored(k, stored_type(n.output), "max_pool_forward", [&]<class T>(T*) {
          return max_pool_forward(s, pool_shape(n.window), at<T>(m.reads[0]), at<T>(m.output));
        });
      break;
    case OpKind::reshape:  // an alias of its input (the plan gives both one region)
      break;
    case OpKind::dense:
      dense_forward(k);
      break;
    case OpKind::dropout:
      check_stored(k, stored_type(n.output), training && n.attr != 0.0 ? "dropout_forward" : "copy", [&]<class T>(T*) {
        if (training && n.attr != 0.0)
          return dropout_forward(s, count, dropout_stream(n.attr, program_.seed, n.index),
                                 control<uint64_t>(block_.step), at<T>(m.reads[0]), at<T>(m.output));
        return copy(s, count, at<T>(m.reads[0]), at<T>(m.output));
      });
      break;
    case OpKind::mse:
      check(mse_forward(s, numel(n.inputs[0]), in(0), in(1), y, ws, ws_bytes), "mse_forward", k);
      break;
    case OpKind::abs_error_sum:
      check(abs_error_sum(s, numel(n.inputs[0]), in(0), in(1), y, ws, ws_bytes), "abs_error_sum", k);
      break;
    case OpKind::batch_norm:
      batch_norm_forward(k, training);
      break;
    case OpKind::add:  // its inputs and the value it writes in one stored type (plan/precision.cpp: ties)
      if (const int64_t relu = plan_.nodes[k].fused_relu; relu >= 0) {  // the relu's output in the same pass
        const int64_t c = program_.value(n.output).shape.back();
        check_stored(k, stored_type(n.inputs[0]), "add_relu_forward", [&]<class T>(T*) {
          return add_relu_forward(s, count / c, c, at<T>(m.reads[0]), at<T>(m.reads[1]),
                                  at<T>(plan_.memory.nodes[static_cast<size_t>(relu)].output));
        });
      } else {
        check_stored(k, stored_type(n.inputs[0]), "add_forward", [&]<class T>(T*) {
          return add_forward(s, count, at<T>(m.reads[0]), at<T>(m.reads[1]), at<T>(m.output));
        });
      }
      break;
    case OpKind::concat:
      check_stored(k, stored_type(n.output), "concat_forward", [&]<class T>(T*) {
        std::vector<const T*> parts;
        for (size_t i = 0; i < n.inputs.size(); ++i) parts.push_back(at<T>(m.reads[i]));
        return concat_forward(s, rows, std::span<const T* const>(parts), n.widths, at<T>(m.output));
      });
      break;
    case OpKind::global_avg_pool:  // x and y in one stored type (plan/precision.cpp: ties)
      check_stored(k, stored_type(n.output), "global_avg_pool_forward", [&]<class T>(T*) {
        return global_avg_pool_forward(s, n.batch, rows / n.batch, channels, at<T>(m.reads[0]),
                                       at<T>(m.output), ws, ws_bytes);
      });
      break;
    case OpKind::broadcast:  // x and y in one stored type
      check_stored(k, stored_type(n.output), "broadcast_forward", [&]<class T>(T*) {
        return broadcast_forward(s, broadcast_shape(n.in_shape, n.out_shape), at<T>(m.reads[0]),
                                 at<T>(m.output));
      });
      break;
    case OpKind::channel_affine:  // x and y as stored (one type), w and b fp32
      check_stored(k, stored_type(n.output), "channel_affine_forward", [&]<class T>(T*) {
        return channel_affine_forward(s, rows, channels, at<T>(m.reads[0]), in(1), in(2), at<T>(m.output));
      });
      break;
    case OpKind::shift_scale:
      // x fp32 (the graph's input), y as stored
      check_stored(k, stored_type(n.output), "shift_scale_forward", [&]<class T>(T*) {
        return shift_scale_forward(s, rows, channels, in(0), in(1), in(2), at<T>(m.output));
      });
      break;
    case OpKind::softmax_cross_entropy:
      check_labels(k);
      check(softmax_cross_entropy_forward(s, rows, channels, in(0), at<int32_t>(m.reads[1]),
                                          control<float>(r.class_weights), y, ws, ws_bytes),
            "softmax_cross_entropy_forward", k);
      break;
    case OpKind::iou:
      check_labels(k);
      check(iou_forward(s, n.batch, rows, channels, in(0), at<int32_t>(m.reads[1]), y, ws, ws_bytes), "iou_forward", k);
      break;
    case OpKind::halo_exchange:
    case OpKind::spatial_gather:
      plan::fail_node(n, "spatial parallelism is not implemented by the cuda backend yet");
  }
}

// The first label outside [0, classes) of this step, kept in the step's results (latched: the host
// reads it when it next waits for the device, and names the node).
void CudaModel::check_labels(size_t k) {
  const sdk::program::Node& n = program_.nodes[k];
  const NodeRuntime& r = nodes_[k];
  const int32_t* labels = at<int32_t>(plan_.memory.nodes[k].reads[1]);
  auto* first = control<int64_t>(r.label_first);
  auto* latched = control<int64_t>(block_.results + sizeof(StepResults) + 2 * sizeof(int64_t) * static_cast<size_t>(r.label_check));
  check(find_bad_label(stream(), n.rows.rows, labels, n.rows.channels, first), "find_bad_label", k);
  check(latch_bad_label(stream(), first, labels, latched), "latch_bad_label", k);
}

void CudaModel::conv_forward(size_t k) {
  const plan::ConvPlan& c = *plan_.nodes[k].conv;
  const plan::NodeMemory& m = plan_.memory.nodes[k];
  const FloatType type = float_type(plan_.precision.nodes[k].data);
  const NodeRuntime& r = nodes_[k];
  const runtime::ConvDescriptors& d = *r.conv;
  const std::string about = node_about(k);
  const cudaStream_t s = stream();
  float* y = at<float>(m.output);
  void* ws = at(m.forward_workspace);
  const size_t ws_bytes = m.forward_workspace ? plan_.memory.regions[static_cast<size_t>(m.forward_workspace.region)].bytes : 0;
  void* written = m.output_scratch ? at(m.output_scratch) : static_cast<void*>(y);  // in the half type, cast up below
  if (!c.transpose) {
    const void* x = at(m.reads[0]);
    if (c.explicit_padding) {  // x into a zeroed buffer spanning its windows; cuDNN pads nothing
      check(cudaMemsetAsync(at(m.padded), 0, plan_.memory.regions[static_cast<size_t>(m.padded.region)].bytes, s),
            "cudaMemsetAsync", k);
      check(box_copy(s, padding_box(c, true), type, x, type, at(m.padded), false), "box_copy", k);
      x = at(m.padded);
    }
    const auto pass = static_cast<size_t>(runtime::ConvPass::forward);
    runtime::check(where_,
                   cudnnConvolutionForward(cudnn_->get(), &kOne, d.x.get(), x, d.w.get(), at(m.reads[1]), d.pass[pass].get(),
                                           static_cast<cudnnConvolutionFwdAlgo_t>(r.conv_algo[pass]), ws, ws_bytes,
                                           &kZero, d.y.get(), written),
                   "cudnnConvolutionForward", about);
    mark("cudnnConvolutionForward");
  } else {  // the adjoint conv's backward data: x is its dy, y its dx (padded when padding is explicit)
    const auto pass = static_cast<size_t>(runtime::ConvPass::backward_data);
    if (c.explicit_padding) written = at(m.padded);
    runtime::check(where_,
                   cudnnConvolutionBackwardData(cudnn_->get(), &kOne, d.w.get(), at(m.reads[1]), d.y.get(), at(m.reads[0]),
                                                d.pass[pass].get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(r.conv_algo[pass]),
                                                ws, ws_bytes, &kZero, d.x.get(), written),
                   "cudnnConvolutionBackwardData", about);
    mark("cudnnConvolutionBackwardData");
    if (c.explicit_padding) {  // y is the padded result's window: positions no window reaches stay 0
      check(cudaMemsetAsync(y, 0, static_cast<size_t>(numel(program_.nodes[k].output)) * sizeof(float), s),
            "cudaMemsetAsync", k);
      check(box_copy(s, padding_box(c, false), type, written, FloatType::f32, y, false), "box_copy", k);
      written = y;
    }
  }
  if (written != y && c.channels)  // conv_transpose's padded channels: cropped as they are cast up
    check(channels_copy(s, numel(program_.nodes[k].output) / c.channels, c.padded_channels, c.channels, type,
                        written, FloatType::f32, y, false),
          "channels_copy", k);
  else if (written != y)
    check(convert(s, numel(program_.nodes[k].output), type, written, FloatType::f32, y), "convert", k);
  if (c.bias && !plan_.nodes[k].bias_in_chain) {  // else the pool chain after it adds the bias as it reads y
    const int32_t out = program_.nodes[k].output;
    const int64_t channels = program_.value(out).shape.back();  // the graph's, never padded
    // y as stored: cuDNN's half y gets its bias in place
    check_stored(k, stored_type(out), "bias_forward", [&]<class T>(T*) {
      return bias_forward(s, numel(out) / channels, channels, at<float>(m.reads[2]),
                          at<T>(m.output));
    });
  }
}

void CudaModel::batch_norm_forward(size_t k, bool training) {
  const sdk::program::Node& n = program_.nodes[k];
  const plan::NodeMemory& m = plan_.memory.nodes[k];
  const NodeRuntime& r = nodes_[k];
  const cudaStream_t s = stream();
  auto in = [&](size_t i) { return at<float>(m.reads[i]); };
  float* y = at<float>(m.output);
  const int64_t rows = n.rows.rows, channels = n.rows.channels;
  const double eps = n.batch_norm.eps, momentum = n.batch_norm.momentum;
  const int64_t relu = plan_.nodes[k].fused_relu;
  if (r.bn_x) {  // cuDNN (backend.batch_norm=cudnn), group_size 1
    if (training)
      runtime::check(where_,
                     cudnnBatchNormalizationForwardTraining(
                         cudnn_->get(), kCudnnTrainingMode, &kOne, &kZero, r.bn_x->get(), in(0), r.bn_x->get(), y,
                         r.bn_params->get(), in(1), in(2), momentum, in(3), in(4), eps, at<float>(m.statistics),
                         at<float>(m.statistics) + channels),
                     "cudnnBatchNormalizationForwardTraining", node_about(k));
    else
      runtime::check(where_,
                     cudnnBatchNormalizationForwardInference(cudnn_->get(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero,
                                                             r.bn_x->get(), in(0), r.bn_x->get(), y, r.bn_params->get(),
                                                             in(1), in(2), in(3), in(4), eps),
                     "cudnnBatchNormalizationForwardInference", node_about(k));
    mark("cudnnBatchNormalizationForward");
    return;
  }
  // Our kernels' passes, the group's sums between them (batch_norm.hpp), x and y as stored (one type:
  // plan/precision.cpp). Workspace: stats, scale and shift, sums.
  const FloatType type = stored_type(n.inputs[0]);
  auto x = [&]<class T>(T*) { return static_cast<const T*>(at<T>(m.reads[0])); };
  const auto c = static_cast<size_t>(channels);
  auto* stats = at<double>(m.forward_workspace);
  const size_t stats_bytes = plan::align_up((2 * c + 1) * sizeof(double), plan::kAlignment);
  auto* scale_shift = reinterpret_cast<float*>(reinterpret_cast<char*>(stats) + stats_bytes);
  void* sums = reinterpret_cast<char*>(scale_shift) + plan::align_up(2 * c * sizeof(float), plan::kAlignment);
  const size_t sums_bytes = channel_sums_workspace_bytes(1, rows, channels);
  if (!training) {
    check(batch_norm_eval_coefficients(s, channels, eps, in(1), in(2), in(3), in(4), scale_shift),
          "batch_norm_eval_coefficients", k);
  } else {
    const bool one_pass = settings_.batch_norm_one_pass;
    if (one_pass) {  // x's sum and sum of squares in one read, one group sum
      check_stored(k, type, "batch_norm_moments",
                   [&]<class T>(T* t) { return batch_norm_moments(s, rows, channels, x(t), stats, sums, sums_bytes); });
      group_sum(k, stats, 2 * channels + 1);
    } else {  // the reference's two passes: the mean, then the squared deviations from it
      check_stored(k, type, "batch_norm_sum",
                   [&]<class T>(T* t) { return batch_norm_sum(s, rows, channels, x(t), stats, sums, sums_bytes); });
      group_sum(k, stats, channels + 1);
      check_stored(k, type, "batch_norm_variance",
                   [&]<class T>(T* t) { return batch_norm_variance(s, rows, channels, x(t), stats, sums, sums_bytes); });
      group_sum(k, stats + channels + 1, channels);
    }
    if (relu >= 0) scale_shift = at<float>(m.statistics) + 2 * channels;  // kept for the relu's mask in backward
    check((one_pass ? batch_norm_finalize_moments : batch_norm_finalize)(
              s, channels, eps, momentum, stats, in(1), in(2), in(3), in(4), at<float>(m.statistics), scale_shift),
          one_pass ? "batch_norm_finalize_moments" : "batch_norm_finalize", k);
  }
  if (relu >= 0)  // the relu's output in the same pass
    check_stored(k, type, "batch_norm_relu_apply", [&]<class T>(T* t) {
      return batch_norm_relu_apply(s, rows, channels, x(t), scale_shift,
                                   at<T>(plan_.memory.nodes[static_cast<size_t>(relu)].output));
    });
  else
    check_stored(k, type, "batch_norm_apply", [&]<class T>(T* t) {
      return batch_norm_apply(s, rows, channels, x(t), scale_shift, at<T>(m.output));
    });
}

// SyncBatchNorm: `count` doubles summed over the node's group, in place, in stream order.
void CudaModel::group_sum(size_t k, double* sums, int64_t count) {
  const NodeRuntime& r = nodes_[k];
  if (!r.group) return;
  const auto n = static_cast<size_t>(count);
  if (r.group_device) {
    r.group_device->allreduce(sums, n, MLPH_DTYPE_F64, MLPH_REDUCE_SUM, stream());
    return;
  }
  // Host collectives: through pinned memory, the host waiting for the device on both sides.
  if (host_sums_.size() < n * sizeof(double))
    host_sums_ = runtime::PinnedBuffer(where_, n * sizeof(double), "batch-norm sums (host collectives)");
  check(cudaMemcpyAsync(host_sums_.data(), sums, n * sizeof(double), cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync", k);
  compute_->synchronize(where_, node_about(k) + " (batch-norm sums)");
  sdk::check(host_, r.group->api->allreduce(r.group->comm, host_sums_.data(), n, MLPH_DTYPE_F64, MLPH_REDUCE_SUM),
             std::string(kWho) + ": " + node_about(k) + ": batch-norm statistics allreduce over its group");
  check(cudaMemcpyAsync(sums, host_sums_.data(), n * sizeof(double), cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync", k);
}

// A pool chain's geometry (the max-pool's window, the leaky ReLU's slope) and the conv's bias (null: none).
PoolChainShape CudaModel::chain_shape(size_t k) const {
  const sdk::program::Node& pool = program_.nodes[k];
  const sdk::program::Node& act = program_.nodes[static_cast<size_t>(plan_.nodes[k].chain_conv) + 1];
  return pool_chain_shape(pool.window, static_cast<float>(act.attr));
}
const float* CudaModel::chain_bias(size_t k) const {
  const auto conv = static_cast<size_t>(plan_.nodes[k].chain_conv);
  return plan_.nodes[conv].bias_in_chain ? at<float>(plan_.memory.nodes[conv].reads[2]) : nullptr;
}

// ---- backward ----

void CudaModel::zero_first_gradients(size_t k) {
  const sdk::program::Node& n = program_.nodes[k];
  const plan::NodeMemory& m = plan_.memory.nodes[k];
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (m.zeroed[i])
      check(cudaMemsetAsync(at(m.gradients[i]), 0,
                            static_cast<size_t>(numel(n.inputs[i])) * plan::bytes_of(plan_.precision.values[static_cast<size_t>(n.inputs[i])]),
                            stream()),
            "cudaMemsetAsync", k);
}

// Input i's gradient, which no one wrote before, written by node k's backward rather than added into a
// zeroed buffer: beta 0 for cuDNN and cuBLASLt, `accumulate` false for our kernels.
bool CudaModel::overwrites_gradient(size_t k, size_t i) const {
  return plan::first_writer_overwrites(program_.nodes[k], plan_.nodes[k], plan_.memory.nodes[k], i);
}

FloatType CudaModel::stored_type(int32_t v) const { return float_type(plan_.precision.values[static_cast<size_t>(v)]); }

void CudaModel::backward(size_t k) {
  if (plan_.nodes[k].engine == plan::Engine::fused) return;  // done by the node before it
  const sdk::program::Node& n = program_.nodes[k];
  const plan::NodeMemory& m = plan_.memory.nodes[k];
  const NodeRuntime& r = nodes_[k];
  const cudaStream_t s = stream();
  if (plan_.nodes[k].engine == plan::Engine::pool_chain) {  // dz written whole (zeros past the windows too)
    if (!m.gradients[0]) return;
    check_stored(k, stored_type(n.output), "pool_chain_backward", [&]<class T>(T*) {
      return pool_chain_backward(s, chain_shape(k), at<T>(m.reads[0]), chain_bias(k),
                                 at<T>(m.output_gradient), at<uint8_t>(m.winners),
                                 at<T>(m.gradients[0]));
    });
    return;
  }
  zero_first_gradients(k);
  auto in = [&](size_t i) { return at<float>(m.reads[i]); };
  auto grad = [&](size_t i) { return i < m.gradients.size() ? at<float>(m.gradients[i]) : nullptr; };
  const float* dy = at<float>(m.output_gradient);
  float* dx = grad(0);
  const int64_t count = numel(n.output), rows = n.rows.rows, channels = n.rows.channels;
  void* ws = at(m.backward_workspace);
  const size_t ws_bytes = m.backward_workspace ? plan_.memory.regions[static_cast<size_t>(m.backward_workspace.region)].bytes : 0;
  const auto alpha = static_cast<float>(n.attr);
  switch (n.kind) {
    case OpKind::conv:
    case OpKind::conv_transpose:
      if (plan_.nodes[k].engine == plan::Engine::depthwise) {  // dx a gather; dw, db straight into the gradients
        const DepthwiseShape shape = depthwise_shape(n.window, n.has_bias());
        const FloatType type = stored_type(n.inputs[0]);  // x, y and their gradients (one type)
        if (dx)
          check_stored(k, type, "depthwise_backward_data", [&]<class T>(T*) {
            return depthwise_backward_data(s, shape, in(1), at<T>(m.output_gradient), at<T>(m.gradients[0]),
                                           !overwrites_gradient(k, 0));
          });
        if (grad(1) || grad(2))
          check_stored(k, type, "depthwise_backward_weights", [&]<class T>(T*) {
            return depthwise_backward_weights(s, shape, at<T>(m.reads[0]), at<T>(m.output_gradient), grad(1),
                                              grad(2), ws, ws_bytes);
          });
      } else if (r.dense) {
        dense_backward(k);
      } else {
        conv_backward(k);
      }
      break;
    case OpKind::dense:
      dense_backward(k);
      break;
    case OpKind::max_pool:
      if (dx)  // x, y, dy, dx in one stored type (plan::tied_values)
        check_stored(k, stored_type(n.output), "max_pool_backward", [&]<class T>(T*) {
          return max_pool_backward(s, pool_shape(n.window), at<T>(m.reads[0]), at<T>(m.output_gradient),
                                   at<T>(m.gradients[0]), !overwrites_gradient(k, 0));
        });
      break;
    case OpKind::mse:
      check(mse_backward(s, numel(n.inputs[0]), in(0), in(1), dy, dx, grad(1),
                         (overwrites_gradient(k, 0) ? 1u : 0u) | (overwrites_gradient(k, 1) ? 2u : 0u)),
            "mse_backward", k);
      break;
    case OpKind::leaky_relu:  // from its output when alpha >= 0 (the plan keeps that), else its input
      if (dx)
        check_stored(k, stored_type(n.output), "leaky_relu_backward", [&]<class T>(T*) {
          return leaky_relu_backward(s, count, alpha, at<T>(n.attr >= 0 ? m.output : m.reads[0]),
                                     at<T>(m.output_gradient), at<T>(m.gradients[0]),
                                     !overwrites_gradient(k, 0));
        });
      break;
    case OpKind::relu:  // y > 0 exactly where x > 0
      if (dx)
        check_stored(k, stored_type(n.inputs[0]), "relu_backward", [&]<class T>(T*) {
          return relu_backward(s, count, at<T>(m.output), at<T>(m.output_gradient), at<T>(m.gradients[0]),
                               !overwrites_gradient(k, 0));
        });
      break;
    case OpKind::tanh:
      if (dx)
        check_stored(k, stored_type(n.output), "tanh_backward", [&]<class T>(T*) {
          return tanh_backward(s, count, at<T>(m.output), at<T>(m.output_gradient), at<T>(m.gradients[0]),
                               !overwrites_gradient(k, 0));
        });
      break;
    case OpKind::scale:
      if (dx)
        check_stored(k, stored_type(n.output), "scale_backward", [&]<class T>(T*) {
          return scale_backward(s, count, alpha, at<T>(m.output_gradient), at<T>(m.gradients[0]),
                                !overwrites_gradient(k, 0));
        });
      break;
    case OpKind::dropout:
      if (!dx) break;
      check_stored(k, stored_type(n.output), n.attr != 0.0 ? "dropout_backward" : "accumulate", [&]<class T>(T*) {
        if (n.attr != 0.0)
          return dropout_backward(s, count, dropout_stream(n.attr, program_.seed, n.index),
                                  control<uint64_t>(block_.step), at<T>(m.output_gradient),
                                  at<T>(m.gradients[0]), !overwrites_gradient(k, 0));
        return accumulate(s, count, at<T>(m.output_gradient), at<T>(m.gradients[0]), !overwrites_gradient(k, 0));
      });
      break;
    case OpKind::batch_norm:
      batch_norm_backward(k);
      break;
    case OpKind::add:
      if (const int64_t relu = plan_.nodes[k].fused_relu; relu >= 0) {  // the relu's gradient, its mask from its output
        const plan::NodeMemory& rm = plan_.memory.nodes[static_cast<size_t>(relu)];
        const int64_t c = program_.value(n.output).shape.back();
        check_stored(k, stored_type(n.inputs[0]), "add_relu_backward", [&]<class T>(T*) {
          // input 1 is written first only where it is not input 0 (add(a, a): a's gradient is
          // written by da, then added into by db)
          const unsigned first = (overwrites_gradient(k, 0) ? 1u : 0u) | (overwrites_gradient(k, 1) ? 2u : 0u);
          return add_relu_backward(s, count / c, c, at<T>(rm.output), at<T>(rm.output_gradient),
                                   at<T>(m.gradients[0]), at<T>(m.gradients[1]), first);
        });
        break;
      }
      for (size_t i = 0; i < 2; ++i)
        if (m.gradients[i])
          check_stored(k, stored_type(n.inputs[0]), "accumulate", [&]<class T>(T*) {
            return accumulate(s, count, at<T>(m.output_gradient), at<T>(m.gradients[i]),
                              !overwrites_gradient(k, i));
          });
      break;
    case OpKind::concat:
      check_stored(k, stored_type(n.output), "concat_backward", [&]<class T>(T*) {
        std::vector<T*> grads;
        uint64_t first = 0;  // the inputs whose gradient this node writes first
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          grads.push_back(at<T>(m.gradients[i]));
          if (overwrites_gradient(k, i)) first |= uint64_t{1} << i;
        }
        return concat_backward(s, rows, std::span<T* const>(grads), n.widths,
                               at<T>(m.output_gradient), first);
      });
      break;
    case OpKind::global_avg_pool:  // dy and dx as stored (x's and y's one type)
      if (dx)
        check_stored(k, stored_type(n.output), "global_avg_pool_backward", [&]<class T>(T*) {
          return global_avg_pool_backward(s, n.batch, rows / n.batch, channels,
                                          at<T>(m.output_gradient), at<T>(m.gradients[0]),
                                          !overwrites_gradient(k, 0));
        });
      break;
    case OpKind::broadcast:
      if (dx)
        check_stored(k, stored_type(n.output), "broadcast_backward", [&]<class T>(T*) {
          return broadcast_backward(s, broadcast_shape(n.in_shape, n.out_shape), at<T>(m.output_gradient),
                                    at<T>(m.gradients[0]), !overwrites_gradient(k, 0));
        });
      break;
    case OpKind::channel_affine:  // x, dy and dx as stored (one type); dw, db fp32
      check_stored(k, stored_type(n.output), "channel_affine_backward", [&]<class T>(T*) {
        return channel_affine_backward(s, rows, channels, at<T>(m.reads[0]), in(1),
                                       at<T>(m.output_gradient), at<T>(m.gradients[0]), grad(1),
                                       grad(2), ws, ws_bytes, !overwrites_gradient(k, 0));
      });
      break;
    case OpKind::softmax_cross_entropy:
      if (dx)
        check(softmax_cross_entropy_backward(s, rows, channels, in(0), at<int32_t>(m.reads[1]),
                                             control<float>(r.class_weights), dy, dx, !overwrites_gradient(k, 0)),
              "softmax_cross_entropy_backward", k);
      break;
    default:  // preprocessing and metrics pass no gradient; reshape is an alias
      break;
  }
}

// cuBLASLt: a dense node, or a pointwise conv (plan::DensePlan); y written as stored (D: fp32, or bf16 for
// bf16 activations), the bias by the epilogue.
void CudaModel::dense_forward(size_t k) {
  const plan::NodeMemory& m = plan_.memory.nodes[k];
  nodes_[k].gemms[0].run(where_, cublaslt_->get(), at(m.reads[1]), at(m.reads[0]), at(m.output), false,
                   at(m.forward_workspace), stream(), node_about(k));
  mark("cublasLtMatmul");
  if (program_.nodes[k].has_bias() && !bias_in_epilogue(k)) {  // y in a half type: the bias added in place
    const plan::Gemm& g = plan_.nodes[k].dense->forward;    // m = out, n = rows
    check_stored(k, stored_type(program_.nodes[k].output), "bias_forward", [&]<class T>(T*) {
      return bias_forward(stream(), g.n, g.m, at<float>(m.reads[2]), at<T>(m.output));
    });
  }
}

// dx written or added as stored (D's type), dw added into its fp32 gradient; a chunked dw (deterministic) written into the workspace's
// partials first and summed in chunk order; the bias gradient our channel sum of dy.
void CudaModel::dense_backward(size_t k) {
  const plan::DensePlan& dense = *plan_.nodes[k].dense;
  const plan::NodeMemory& m = plan_.memory.nodes[k];
  const cudaStream_t s = stream();
  const std::string about = node_about(k);
  auto grad = [&](size_t i) { return i < m.gradients.size() ? at<float>(m.gradients[i]) : nullptr; };
  const float* dy = at<float>(m.output_gradient);
  auto* ws = static_cast<char*>(at(m.backward_workspace));
  const size_t ws_bytes = m.backward_workspace ? plan_.memory.regions[static_cast<size_t>(m.backward_workspace.region)].bytes : 0;
  const void* dy_operand = dy;
  if (m.output_gradient_cast) {
    check(convert(s, numel(program_.nodes[k].output), FloatType::f32, dy, float_type(plan_.precision.nodes[k].data),
                  at(m.output_gradient_cast)),
          "convert", k);
    dy_operand = at(m.output_gradient_cast);
  }
  float *dx = grad(0), *dw = grad(1);
  if (dx) nodes_[k].gemms[1].run(where_, cublaslt_->get(), at(m.reads[1]), dy_operand, dx, !overwrites_gradient(k, 0), ws, s,
                                 about);
  // A chunked dw (deterministic) goes into the workspace's partials first, the gemm's workspace after them.
  const size_t partials = plan::align_up(dense.partial_bytes(), plan::kAlignment);
  auto* partial = reinterpret_cast<float*>(ws);
  if (dw && partials == 0)
    nodes_[k].gemms[2].run(where_, cublaslt_->get(), dy_operand, at(m.reads[0]), dw, true, ws, s, about);
  else if (dw)
    nodes_[k].gemms[2].run(where_, cublaslt_->get(), dy_operand, at(m.reads[0]), partial, false, ws + partials, s, about);
  // backend.profile: one row for the gemms (FLOPs counted twice when both ran), the chunks' sum its own.
  if (dx || dw) mark(dx && dw ? "cublasLtMatmul (dx, dw)" : "cublasLtMatmul");
  if (dw && partials != 0) {
    const plan::Gemm& g = dense.backward_weights;
    check(chunk_sum_add(s, g.batch, g.m * g.n, partial, dw), "chunk_sum_add", k);
  }
  if (float* db = grad(2)) {
    const plan::Gemm& g = dense.forward;  // m = out, n = rows
    check_stored(k, stored_type(program_.nodes[k].output), "bias_backward",  // dy as stored
                 [&]<class T>(T*) { return bias_backward(s, g.n, g.m, at<T>(m.output_gradient), db, ws, ws_bytes); });
  }
}

void CudaModel::conv_backward(size_t k) {
  const sdk::program::Node& n = program_.nodes[k];
  const plan::ConvPlan& c = *plan_.nodes[k].conv;
  const plan::NodeMemory& m = plan_.memory.nodes[k];
  const FloatType type = float_type(plan_.precision.nodes[k].data);
  const NodeRuntime& r = nodes_[k];
  const runtime::ConvDescriptors& d = *r.conv;
  const std::string about = node_about(k);
  const cudaStream_t s = stream();
  const float* dy = at<float>(m.output_gradient);
  void* ws = at(m.backward_workspace);
  const size_t ws_bytes = m.backward_workspace ? plan_.memory.regions[static_cast<size_t>(m.backward_workspace.region)].bytes : 0;
  float* dx = at<float>(m.gradients[0]);
  const size_t dx_count = static_cast<size_t>(numel(n.inputs[0]));
  // dy as the library reads it: cast down, or (conv_transpose, explicit padding) padded on the conv's input side.
  const void* dy_operand = dy;
  if (c.transpose && c.explicit_padding) {
    check(cudaMemsetAsync(at(m.padded_gradient), 0, plan_.memory.regions[static_cast<size_t>(m.padded_gradient.region)].bytes, s),
          "cudaMemsetAsync", k);
    check(box_copy(s, padding_box(c, true), FloatType::f32, dy, type, at(m.padded_gradient), false), "box_copy", k);
    dy_operand = at(m.padded_gradient);
  } else if (m.output_gradient_cast && c.channels) {  // conv_transpose's padded channels: zeros past them
    check(channels_copy(s, numel(n.output) / c.channels, c.channels, c.padded_channels, FloatType::f32, dy, type,
                        at(m.output_gradient_cast), false),
          "channels_copy", k);
    dy_operand = at(m.output_gradient_cast);
  } else if (m.output_gradient_cast) {
    check(convert(s, numel(n.output), FloatType::f32, dy, type, at(m.output_gradient_cast)), "convert", k);
    dy_operand = at(m.output_gradient_cast);
  }
  // dx: into the fp32 gradient (adding), or a scratch of the node's type first (written, then cast and added).
  void* dx_written = m.gradient_scratch.size() > 0 && m.gradient_scratch[0] ? at(m.gradient_scratch[0]) : static_cast<void*>(dx);
  if (!c.transpose && c.explicit_padding) dx_written = at(m.padded_gradient);
  const float* dx_beta = dx_written == dx && !overwrites_gradient(k, 0) ? &kOne : &kZero;
  const void* w = at(m.reads[1]);
  if (dx && !c.transpose) {
    const auto pass = static_cast<size_t>(runtime::ConvPass::backward_data);
    runtime::check(where_,
                   cudnnConvolutionBackwardData(cudnn_->get(), &kOne, d.w.get(), w, d.y.get(), dy_operand, d.pass[pass].get(),
                                                static_cast<cudnnConvolutionBwdDataAlgo_t>(r.conv_algo[pass]), ws, ws_bytes,
                                                dx_beta, d.x.get(), dx_written),
                   "cudnnConvolutionBackwardData", about);
    mark("cudnnConvolutionBackwardData");
    if (c.explicit_padding)  // the input's part of d(padded x), added
      check(box_copy(s, padding_box(c, false), type, dx_written, FloatType::f32, dx, true), "box_copy", k);
  } else if (dx) {  // conv_transpose: its dx is the adjoint conv's forward of dy
    const auto pass = static_cast<size_t>(runtime::ConvPass::forward);
    runtime::check(where_,
                   cudnnConvolutionForward(cudnn_->get(), &kOne, d.x.get(), dy_operand, d.w.get(), w, d.pass[pass].get(),
                                           static_cast<cudnnConvolutionFwdAlgo_t>(r.conv_algo[pass]), ws, ws_bytes, dx_beta,
                                           d.y.get(), dx_written),
                   "cudnnConvolutionForward", about);
    mark("cudnnConvolutionForward");
  }
  if (dx && dx_written != dx && !(!c.transpose && c.explicit_padding))
    check(convert_add(s, static_cast<int64_t>(dx_count), type, dx_written, dx, !overwrites_gradient(k, 0)), "convert_add", k);
  // dw in cuDNN's layout, the masters' (plan/weights.hpp): fp32 added into the gradient buffer in place;
  // half types written into the node's scratch, then cast and added.
  if (float* dw = at<float>(m.gradients[1])) {
    const auto pass = static_cast<size_t>(runtime::ConvPass::backward_filter);
    const void* x = c.transpose ? dy_operand : (c.explicit_padding ? at(m.padded) : at(m.reads[0]));
    const void* conv_dy = c.transpose ? at(m.reads[0]) : dy_operand;
    void* dw_written = m.weight_gradient ? at(m.weight_gradient) : static_cast<void*>(dw);
    runtime::check(where_,
                   cudnnConvolutionBackwardFilter(cudnn_->get(), &kOne, d.x.get(), x, d.y.get(), conv_dy, d.pass[pass].get(),
                                                  static_cast<cudnnConvolutionBwdFilterAlgo_t>(r.conv_algo[pass]), ws,
                                                  ws_bytes, m.weight_gradient ? &kZero : &kOne, d.w.get(), dw_written),
                   "cudnnConvolutionBackwardFilter", about);
    mark("cudnnConvolutionBackwardFilter");
    if (m.weight_gradient && c.channels)  // padded: each filter row's first channels, the rest are zero rows
      check(channels_copy(s, c.filter.rows * c.filter.cols / c.padded_channels, c.padded_channels, c.channels, type,
                          dw_written, FloatType::f32, dw, true),
            "channels_copy", k);
    else if (m.weight_gradient)
      check(convert_add(s, c.filter.rows * c.filter.cols, type, dw_written, dw), "convert_add", k);
  }
  if (float* db = m.gradients.size() > 2 ? at<float>(m.gradients[2]) : nullptr) {
    const int64_t channels = program_.value(program_.nodes[k].output).shape.back();  // the graph's, never padded
    // dy as stored (half activations end to end)
    check_stored(k, stored_type(n.output), "bias_backward", [&]<class T>(T*) {
      return bias_backward(s, numel(n.output) / channels, channels,
                           at<T>(m.output_gradient), db, ws, ws_bytes);
    });
  }
}

void CudaModel::batch_norm_backward(size_t k) {
  const sdk::program::Node& n = program_.nodes[k];
  const plan::NodeMemory& m = plan_.memory.nodes[k];
  const NodeRuntime& r = nodes_[k];
  const cudaStream_t s = stream();
  auto in = [&](size_t i) { return at<float>(m.reads[i]); };
  float* dx = at<float>(m.gradients[0]);
  float* dgamma = at<float>(m.gradients[1]);
  float* dbeta = at<float>(m.gradients[2]);
  const float* dy = at<float>(m.output_gradient);
  const float* saved = at<float>(m.statistics);  // mean and 1/sqrt(var + eps), cuDNN's saved values too
  const int64_t rows = n.rows.rows, channels = n.rows.channels;
  if (r.bn_x && dx && dgamma && dbeta) {  // cuDNN, adding into the three gradients
    runtime::check(where_,
                   cudnnBatchNormalizationBackward(cudnn_->get(), kCudnnTrainingMode, &kOne, &kOne, &kOne, &kOne,
                                                   r.bn_x->get(), in(0), r.bn_x->get(), dy, r.bn_x->get(), dx,
                                                   r.bn_params->get(), in(1), dgamma, dbeta, n.batch_norm.eps, saved,
                                                   saved + channels),
                   "cudnnBatchNormalizationBackward", node_about(k));
    mark("cudnnBatchNormalizationBackward");
    return;
  }
  // Our kernels (the default, SyncBatchNorm, or a gradient cuDNN would write that nobody needs).
  const auto c = static_cast<size_t>(channels);
  auto* sums = at<double>(m.backward_workspace);
  auto* coefficients = reinterpret_cast<float*>(reinterpret_cast<char*>(sums) +
                                                plan::align_up((2 * c + 1) * sizeof(double), plan::kAlignment));
  void* scratch = reinterpret_cast<char*>(coefficients) + plan::align_up(3 * c * sizeof(float), plan::kAlignment);
  const size_t scratch_bytes = channel_sums_workspace_bytes(1, rows, channels);
  // x, dy and dx as stored (one type: plan/precision.cpp).
  const FloatType type = stored_type(n.inputs[0]);
  auto x = [&]<class T>(T*) { return static_cast<const T*>(at<T>(m.reads[0])); };
  auto dx_of = [&]<class T>(T*) { return at<T>(m.gradients[0]); };
  if (const int64_t relu = plan_.nodes[k].fused_relu; relu >= 0) {  // dy is the relu output's; the mask recomputed
    const plan::Location relu_dy = plan_.memory.nodes[static_cast<size_t>(relu)].output_gradient;
    auto g = [&]<class T>(T*) { return static_cast<const T*>(at<T>(relu_dy)); };
    const float* scale_shift = saved + 2 * channels;
    check_stored(k, type, "batch_norm_relu_backward_sums", [&]<class T>(T* t) {
      return batch_norm_relu_backward_sums(s, rows, channels, x(t), g(t), saved, scale_shift, sums, scratch,
                                           scratch_bytes);
    });
    check(batch_norm_backward_params(s, channels, sums, dgamma, dbeta), "batch_norm_backward_params", k);
    group_sum(k, sums, 2 * channels + 1);
    if (dx)
      check_stored(k, type, "batch_norm_relu_backward_data", [&]<class T>(T* t) {
        return batch_norm_relu_backward_data(s, rows, channels, x(t), g(t), in(1), saved, scale_shift, sums,
                                             coefficients, dx_of(t), !overwrites_gradient(k, 0));
      });
    return;
  }
  auto g = [&]<class T>(T*) { return static_cast<const T*>(at<T>(m.output_gradient)); };
  check_stored(k, type, "batch_norm_backward_sums", [&]<class T>(T* t) {
    return batch_norm_backward_sums(s, rows, channels, x(t), g(t), saved, sums, scratch, scratch_bytes);
  });
  check(batch_norm_backward_params(s, channels, sums, dgamma, dbeta), "batch_norm_backward_params", k);
  group_sum(k, sums, 2 * channels + 1);
  if (dx)
    check_stored(k, type, "batch_norm_backward_data", [&]<class T>(T* t) {
      return batch_norm_backward_data(s, rows, channels, x(t), g(t), in(1), saved, sums, coefficients, dx_of(t),
                                      !overwrites_gradient(k, 0));
    });
}

}  // namespace mlph::cuda
