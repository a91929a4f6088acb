// Lowering for the device: which library runs each node, and the parameters of its cuDNN
// descriptors or cuBLASLt matrix layouts. Pure functions of the SDK's lowered Program
// (sdk::program::lower_graph, called with implemented() below).
//
//   conv            cuDNN convolution (2-D as 4-D tensors, 3-D as 5-D), channels-last as strides;
//                   strided, dilated, grouped and depthwise alike
//   conv_transpose  cuDNN backward-data of its adjoint conv (docs/ops.md: conv_transpose is that adjoint)
//   conv, depthwise (groups = in = out channels, not transposed): our kernel (depthwise.hpp) unless
//                   `backend.depthwise=cudnn`: cuDNN has only its grouped algorithms for it
//   batch_norm      our kernels (batch_norm.hpp: deterministic two-stage sums, coalesced over NHWC),
//                   the only way with group_size > 1 (SyncBatchNorm needs the group's sums between the
//                   passes). `backend.batch_norm=cudnn` with group_size 1: cuDNN's persistent spatial
//                   batch norm, whose training forward normalizes with the biased variance, saves mean
//                   and 1/sqrt(var+eps), and updates the running variance with the unbiased one,
//                   exponentialAverageFactor being our momentum: exactly docs/ops.md.
//   dense           cuBLASLt, on the graph's [in, out] weights as they are (see DensePlan)
//   conv 1x1        a pointwise conv (1x1 kernel, stride 1, no padding, one group) is a dense layer in
//                   NHWC: y[N·S, Co] = x[N·S, Ci] w[Ci, Co], the graph's weights [1.., Ci, Co] already
//                   the matrix cuBLASLt reads (no transpose, no copy in fp32). `pointwise` = cudnn
//                   keeps it on cuDNN (for comparison on a GPU).
//   reshape         an alias of its input: no copy, no kernel
//   max_pool        our kernel: docs/ops.md gives the gradient to the first maximum of a window in
//                   row-major order; cuDNN documents no rule for ties. After conv -> leaky_relu (each
//                   output read by the next node alone) with windows that tile: one pool chain
//                   (NodeLowering::chain_conv) unless `backend.pool_chain=off`
//   everything else our kernels (element-wise, per-channel, losses, metrics)
//   halo_exchange, spatial_gather: not implemented (spatial parallelism): implemented() leaves them
//                   out, so the validator refuses a graph using them in one line naming the node.
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "types.hpp"

namespace mlph::cuda::plan {

// What lower_graph is told the cuda backend implements: every op but the spatial ones.
sdk::Implements implemented();

// depthwise: our depthwise conv kernel. fused: runs inside another node (a ReLU after a batch norm
// on our kernels or an add: NodeLowering::fused_relu; a leaky ReLU inside a pool chain), no work of
// its own. pool_chain: a max_pool running the bias + leaky ReLU + max-pool chain from the conv's output.
enum class Engine {
  cudnn_conv,
  cudnn_conv_transpose,
  cudnn_batch_norm,
  cublaslt_dense,
  kernel,
  alias,
  depthwise,
  fused,
  pool_chain
};

// Which ops run on our kernels rather than cuDNN (backend.batch_norm, backend.depthwise: own|cudnn),
// and whether CosmoFlow's conv -> leaky_relu -> max_pool runs as one pool chain (backend.pool_chain:
// own|off).
struct OwnKernels {
  bool batch_norm = true;
  bool depthwise = true;
  bool pool_chain = true;
};

// groups = in channels = out channels (the reference's depthwise path too).
bool is_depthwise(const Node& node);

const char* name_of(Engine engine);

// A cuDNN tensor descriptor (cudnnSetTensorNdDescriptor): dims in cuDNN's order [N, C, spatial...],
// strides making the memory channels-last [N, spatial..., C]. rank 4 for 2-D, 5 for 3-D.
struct TensorDesc {
  int rank = 0;
  std::array<int64_t, 5> dims{}, strides{};
};

// A channels-last value of shape [N, spatial..., C] as a cuDNN tensor.
TensorDesc channels_last(const std::vector<int64_t>& shape);

// A cuDNN filter descriptor in CUDNN_TENSOR_NHWC format: dims [Co, Ci/groups, spatial...], memory
// [Co, spatial..., Ci/groups]. The graph keeps conv weights as [spatial..., Ci/groups, Co]: viewed as
// a matrix [rows = taps * Ci/groups, cols = Co], the device copy is its transpose [cols, rows].
struct FilterDesc {
  int rank = 0;
  std::array<int64_t, 5> dims{};
  int64_t rows = 0, cols = 0;  // the graph layout as [rows, cols]; the device layout is [cols, rows]
};

// One convolution for cuDNN. For conv_transpose, the conv is its adjoint: `in` is the node's output
// and `out` its input; the node's forward is cudnnConvolutionBackwardData(w, dy = x, dx = y), its
// backward cudnnConvolutionForward(dy) for dx and cudnnConvolutionBackwardFilter(x = dy, dy = x) for dw.
//
// Padding: cuDNN pads both sides alike. When the node's padding (before, after) gives the same
// windows as `pad` = before on both sides (the output size formula agrees), cuDNN pads itself.
// Otherwise (`explicit_padding`) the conv's input side is a zeroed buffer `padded` with the input
// at `offset` along each spatial dim, and cuDNN pads nothing: conv copies x in before the conv (and
// crops dx out of its gradient); conv_transpose has backward-data write the padded buffer and crops
// y out of it (and pads dy for its backward). `padded` spans exactly the windows' extent
// (out-1)*stride + dilation*(kernel-1) + 1; input positions past it are never read (gradient 0).
//
// Types (precision.hpp, PrecisionPlan::nodes of the node): `data` for the tensors and the filter
// (cudnnDataType_t), always CUDNN_DATA_FLOAT for the convolution descriptor's compute type, `math`
// for its math type.
struct ConvPlan {
  bool transpose = false;
  int spatial = 2;  // 2 or 3; the arrays below hold `spatial` entries
  TensorDesc in, out;
  FilterDesc filter;
  std::array<int64_t, 3> pad{}, stride{}, dilation{};
  int64_t groups = 1;
  bool bias = false;  // added by our per-channel kernel; its gradient is our per-channel sum
  bool explicit_padding = false;
  TensorDesc padded;                 // explicit_padding: the conv's input side, padded
  std::array<int64_t, 3> offset{};   // explicit_padding: where the unpadded tensor starts in it
  std::array<int64_t, 3> copied{};   // explicit_padding: positions of the unpadded tensor that fit in it
  // Padded channels (pad_channels): 0 when `in` and the filter's Ci are the graph's. Otherwise the
  // input side's channels as the graph has them (times `taps` where taps are folded), and both `in`
  // and the filter have `padded_channels`, a multiple of kTensorCoreChannels.
  int64_t channels = 0, padded_channels = 0;
  // Taps folded (a conv, pad_channels with fold_taps): the last spatial axis's `taps` taps are
  // channels. `in` is x's `taps` copies side by side along the last axis at the output's positions,
  // copy t shifted by t - tap_pad (zeros outside x), and the kernel is 1 there, unpadded. The graph's
  // weight [K..., kw, Ci, Co] is, as it lies, the weight [K..., 1, kw * Ci, Co].
  int64_t taps = 1, tap_pad = 0;
};

// Tensor cores (bf16, fp16) want channels in multiples of 8; a conv with fewer on its input side
// runs at a fraction of their speed (CosmoFlow's conv1, 4 channels: 8 TFLOP/s on an H200). Such a
// cuDNN conv is padded to 8 channels where it is cast anyway, invisibly outside the backend (the
// fp32 masters, gradients, checkpoints keep the graph's shapes). With `fold_taps`
// (backend.small_channels=fold), a conv first folds its taps along the last spatial axis into the
// channels where that pads less (stride and dilation 1 there): CosmoFlow's conv1 runs as a 3x3x1 conv
// over 12 channels padded to 16, 1.33x the unpadded work instead of 2x (ConvPlan::taps):
//   conv (CosmoFlow conv1, 4 -> 8): x cast into an 8-channel half buffer, zeros in 4-7; the weights'
//     half copy [Co, taps, 8] with zero rows (cast from the unpadded masters after the host's writes;
//     the update writes the 3 or 4 master channels of each row, so the zeros stay); dw written [Co, taps, 8] and its first channels added into the gradient.
//     Only when x needs no gradient (a padded dx would need cropping: no graph of ours has one).
//   conv_transpose (DeepCAM last_deconv, 3 classes -> 8): the adjoint conv's input side is the node's
//     output: backward-data writes 8 half channels, cropped to 3 as they are cast up (the loss reads
//     3); dy is cast into 8 with zeros for its backward.
// One group, no explicit padding, half precisions only (fp32 and tf32 gain nothing from it).
inline constexpr int64_t kTensorCoreChannels = 8;
bool pads_channels(const ConvPlan& conv, bool half, bool input_needs_gradient);
void pad_channels(ConvPlan& conv, bool fold_taps);

// cuDNN spatial batch norm (CUDNN_BATCHNORM_SPATIAL): x and y as `x`, any [N, S..., C] seen as the
// 4-D [N, C, P, 1] (P = the spatial positions; the statistics are over N, H and W alike); scale,
// bias, mean and var as cudnnDeriveBNTensorDescriptor gives ([1, C, 1, 1], float32), in every
// precision. exponentialAverageFactor = momentum.
struct BatchNormPlan {
  TensorDesc x;
  int64_t channels = 0;
  double eps = 1e-5, momentum = 0.1;
};

// One cuBLASLt matmul in its column-major terms: D[m, n] = op(A)[m, k] * op(B)[k, n], leading
// dimensions lda, ldb, ldd (row counts of the stored, untransposed matrices). `batch` > 1: that many
// products, the i-th reading A, B and writing D `stride_*` elements further on (strided batch).
struct Gemm {
  bool transpose_a = false, transpose_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_d = 0;
};

// dense y[N, out] = x[N, in] w[in, out] (+ b) with row-major buffers, in cuBLASLt's column-major
// view (a row-major [r, c] buffer is a column-major [c, r] matrix): no copy of any operand.
//   forward:          A = w, B = x, D = y (the bias by the epilogue CUBLASLT_EPILOGUE_BIAS: per row m)
//   backward_data:    A = w (transposed), B = dy, D = dx
//   backward_weights: A = dy, B = x (transposed), D = dw, written in fp32 into the gradient buffer
// The bias gradient is our per-channel sum of dy (deterministic; no cuBLASLt BGRAD epilogue).
//
// dw sums over the batch's rows (a pointwise conv's: N·S, up to 1.8 M in DeepCAM) onto a small
// [in, out]: one gemm has few output tiles to spread over the GPU. Not deterministic: cuBLASLt's
// split-K (its heuristic's choice). Deterministic (no split-K, whose partial sums meet in varying
// order): `weight_chunks` > 1 equal slices of the rows, one strided-batch gemm writing each slice's
// product into its own [in, out] partial (the backward workspace, `partial_bytes()`), then our
// kernel adds them in chunk order into the gradient (chunk_sum_add): the same bits on every run.
struct DensePlan {
  Gemm forward, backward_data, backward_weights;
  bool bias = false;
  int64_t weight_chunks = 1;
  size_t partial_bytes() const;  // the partials' fp32 bytes (0 with one chunk)
};

// How many equal slices of `rows` a deterministic dw takes (see DensePlan): enough products to fill
// about two waves of a large GPU's multiprocessors (kChunkTiles 128x128 output tiles in all), each of
// at least kChunkRows rows, at most kMaxChunks, the partials within a quarter of `workspace_cap`, and
// a divisor of `rows` (equal slices: one strided-batch call). 1 without `deterministic`.
inline constexpr int64_t kChunkTiles = 264, kChunkRows = 2048, kMaxChunks = 64;
int64_t weight_chunks(int64_t rows, int64_t in, int64_t out, bool deterministic, size_t workspace_cap);

// `pointwise`: how 1x1 stride-1 convs run (backend.pointwise); `deterministic`: dw's chunks; `own`:
// batch norm and depthwise convs on our kernels or cuDNN's (backend.batch_norm, backend.depthwise).
enum class Pointwise { gemm, cudnn };
struct LoweringOptions {
  Pointwise pointwise = Pointwise::gemm;
  bool deterministic = false;
  size_t workspace_cap = size_t{1} << 30;
  bool half = false;  // bf16, fp16: tensor cores (pads_channels)
  OwnKernels own{};
  bool fold_taps = true;  // backend.small_channels=fold (pad_channels)
};

// A node as the device runs it.
struct NodeLowering {
  Engine engine = Engine::kernel;
  std::optional<ConvPlan> conv;        // cudnn_conv, cudnn_conv_transpose
  std::optional<BatchNormPlan> batch_norm;  // cudnn_batch_norm
  std::optional<DensePlan> dense;      // cublaslt_dense (a dense node, or a pointwise conv)
  // batch_norm on our kernels, or add, whose output only the next node, a relu, reads: that relu's
  // index; the relu is Engine::fused. One pass writes the relu's output (fused.hpp); backward reads
  // the relu's output gradient and its mask: batch norm recomputes it from x and the forward's scale
  // and shift (saved with the statistics: [4C]), add reads the relu's output. -1: none.
  int64_t fused_relu = -1;
  // Pool chain (kernels/pool_chain.hpp: CosmoFlow's bias + leaky ReLU + max-pool in one read of the
  // conv's output): a conv on cuDNN whose output z only a leaky_relu reads, whose output only a
  // max_pool of tiling windows reads. The max_pool is Engine::pool_chain with `chain_conv` the conv's
  // index: forward reads z (and the conv's bias) and writes y and a 1-byte winner per window and
  // channel; backward writes dz (the conv's output gradient, first and only writer) from dy, the
  // winner and z. The leaky_relu is Engine::fused with `fused_into` the max_pool's index: no step, no
  // output, no gradient of its own. The conv (`bias_in_chain`) does not add its bias; its backward's
  // bias gradient is the channel sum of dz as before.
  int64_t chain_conv = -1;
  int64_t fused_into = -1;
  bool bias_in_chain = false;
};

// Per node of `program`, in order, with `options`' choices (options.own: batch norm and depthwise on our
// kernels or cuDNN's; options.pointwise: 1x1 convs on cuBLASLt or cuDNN). Throws (fail_node) for what
// the device cannot run: spatial ops, weights of conv/dense that are not parameters, tensors past
// cuDNN's 32-bit sizes.
std::vector<NodeLowering> lower_nodes(const Program& program, const LoweringOptions& options = {});

// A conv that is a matrix product over channels-last rows: 1x1(x1) kernel, stride 1, no padding, one group.
bool is_pointwise(const Node& node);

// The parameters of each node's lowering, from its Node (exposed for tests).
ConvPlan plan_conv(const Program& program, const Node& node);
BatchNormPlan plan_batch_norm(const Program& program, const Node& node);
DensePlan plan_dense(const Node& node);
// A pointwise conv as dense: rows = N x spatial positions, in = Ci, out = Co.
DensePlan plan_pointwise(const Node& node);
// The gemms of y[batch, out] = x[batch, in] w[in, out] (plan_dense's and plan_pointwise's).
DensePlan plan_matmul(int64_t batch, int64_t in, int64_t out, bool bias, int64_t weight_chunks = 1);

}  // namespace mlph::cuda::plan
