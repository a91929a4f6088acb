// The launchers of launch.hpp that sum: batch-norm statistics, channel_affine's and global pooling's
// sums over rows, the losses, iou's counts, LAMB's norms, the L2 penalty, the fp16 overflow count;
// and the multi-tensor optimizer kernels. The reductions' order is fixed by the problem's sizes
// alone (reduce.hpp), so each sum has the same bits on every run; there are no float atomics.
#include "channel_sums.cuh"
#include "grid.cuh"
#include "launch.hpp"

namespace mlph::cuda {
namespace {

// ---- flat sums and chunk sums: a block per part, thread t summing t, t + 256, ..., then a fixed tree ----

template <int K>
__device__ void block_sum(const double (&sum)[K], double* out) {
  __shared__ double shared[K][kThreads];
  const int t = threadIdx.x;
  for (int k = 0; k < K; ++k) shared[k][t] = sum[k];
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    __syncthreads();
    if (t < stride)
      for (int k = 0; k < K; ++k) shared[k][t] += shared[k][t + stride];
  }
  if (t == 0)
    for (int k = 0; k < K; ++k) out[k] = shared[k][0];
  __syncthreads();  // before a next call writes shared[] again
}

// Part p of flat_parts(n): [n p / parts, n (p + 1) / parts); partial[p * K + k]. term(i, t).
template <class Term>
__global__ void flat_partials_kernel(Term term, int64_t n, int64_t parts, double* partial) {
  constexpr int K = Term::K;
  const int64_t part = blockIdx.x, begin = n * part / parts, end = n * (part + 1) / parts;
  double sum[K] = {};
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    double t[K];
    term(i, t);
    for (int k = 0; k < K; ++k) sum[k] += t[k];
  }
  block_sum(sum, partial + part * K);
}

// One thread adds the parts in order and hands the K sums to `finish`.
template <int K, class Finish>
__global__ void flat_finish_kernel(const double* partial, int64_t parts, Finish finish) {
  double sums[K] = {};
  for (int64_t part = 0; part < parts; ++part)
    for (int k = 0; k < K; ++k) sums[k] += partial[part * K + k];
  finish(sums);
}

template <class Term, class Finish>
cudaError_t flat_sums(cudaStream_t stream, const Term& term, int64_t n, const Finish& finish, void* workspace,
                      size_t bytes) {
  if (!workspace || bytes < flat_sums_workspace_bytes(n)) return cudaErrorInvalidValue;
  const int64_t parts = flat_parts(n);
  auto* partial = static_cast<double*>(workspace);
  flat_partials_kernel<<<static_cast<unsigned>(parts), kThreads, 0, stream>>>(term, n, parts, partial);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  flat_finish_kernel<Term::K><<<1, 1, 0, stream>>>(partial, parts, finish);
  return cudaGetLastError();
}

__device__ bool skipped(const double* nonfinite) { return nonfinite && *nonfinite > 0; }

// A block per chunk: term(i, tensor, t) over the chunk, its K sums to partial[chunk * K + k].
template <class Term>
__global__ void chunk_partials_kernel(Term term, const Chunk* chunks, int64_t count, double* partial,
                                      const double* nonfinite) {
  constexpr int K = Term::K;
  if (skipped(nonfinite)) return;
  for (int64_t b = blockIdx.x; b < count; b += gridDim.x) {
    const Chunk chunk = chunks[b];
    double sum[K] = {};
    for (int64_t i = chunk.begin + threadIdx.x; i < chunk.end; i += kThreads) {
      double t[K];
      term(i, chunk.tensor, t);
      for (int k = 0; k < K; ++k) sum[k] += t[k];
    }
    block_sum(sum, partial + b * K);
  }
}

unsigned chunk_blocks(int64_t count) { return static_cast<unsigned>(count < 65535 ? count : 65535); }

template <class Term>
cudaError_t chunk_sums(cudaStream_t stream, const Term& term, const DeviceChunks& chunks, double* partial,
                       const double* nonfinite) {
  if (chunks.count > 0)
    chunk_partials_kernel<<<chunk_blocks(chunks.count), kThreads, 0, stream>>>(term, chunks.chunks, chunks.count,
                                                                             partial, nonfinite);
  return cudaGetLastError();
}

// ---- finishing steps ----

struct StoreMse {
  float* loss;
  int64_t n;
  __device__ void operator()(const double* sums) const { *loss = mse_loss(sums[0], n); }
};
struct StoreSum {
  float* out;
  __device__ void operator()(const double* sums) const { *out = static_cast<float>(sums[0]); }
};
struct StoreCrossEntropy {
  float* loss;
  int64_t rows;
  __device__ void operator()(const double* sums) const { *loss = softmax_cross_entropy_loss(sums[0], rows); }
};
struct StoreDouble {
  double* out;
  __device__ void operator()(const double* sums) const { *out = sums[0]; }
};

// Flat terms seen as chunk-less (term(i, t)) from the headers' functors of one index.
struct GradientSquareTerm {
  static constexpr int K = 1;
  const float* g;
  __device__ void operator()(int64_t i, int32_t, double* t) const { t[0] = square(g[i]); }
};
struct LambMomentsTerm {
  static constexpr int K = 2;
  const LambScalars* scalars;
  const float* clip;
  const float* g;
  float* m;
  float* v;
  const float* w;
  float* update;
  __device__ void operator()(int64_t i, int32_t tensor, double* t) const {
    lamb_moments_at(i, scalars[tensor], *clip, g, m, v, w, update);
    t[0] = square(w[i]);
    t[1] = square(update[i]);
  }
};
struct L2Term {
  static constexpr int K = 1;
  const double* l2;
  const float* w;
  float* dw;
  __device__ void operator()(int64_t i, int32_t tensor, double* t) const {
    const double l = l2[tensor];
    if (l == 0) {
      t[0] = 0;
      return;
    }
    if (dw) l2_gradient_at(i, l, w, dw);
    t[0] = square(w[i]);
  }
};

// LAMB: the gradients' square sum over every chunk in order, and the clip from it.
__global__ void lamb_clip_kernel(const double* partial, int64_t count, double max_grad_norm, double* square_sum,
                                 float* clip) {
  double sum = 0;
  for (int64_t b = 0; b < count; ++b) sum += partial[b];
  *square_sum = sum;
  *clip = lamb_clip(sum, max_grad_norm);
}

// LAMB: per tensor, ||p||^2 and ||u||^2 over its chunks in order, and its step.
__global__ void lamb_steps_kernel(const double* partial, const int64_t* first_chunk, int32_t tensors,
                                  const LambScalars* scalars, float* steps) {
  for (int64_t t = first_index(); t < tensors; t += grid_stride()) {
    double p_square = 0, u_square = 0;
    for (int64_t b = first_chunk[t]; b < first_chunk[t + 1]; ++b) p_square += partial[2 * b], u_square += partial[2 * b + 1];
    steps[t] = lamb_step(scalars[t], p_square, u_square);
  }
}

// A block's share of a chunk: thread t takes its aligned middle V elements at a time (16-byte
// accesses, a 32-bit count: a chunk is kOptimizerChunk elements at most) and its ends one by one.
template <int V, class Vector, class One>
__device__ __forceinline__ void each_in_chunk(const Chunk& chunk, Vector vector, One one) {
  const VectorSplit split = vector_split(chunk.begin, chunk.end, V);
  for (int64_t i = chunk.begin + threadIdx.x; i < split.head; i += kThreads) one(i);
  const auto vectors = static_cast<uint32_t>((split.tail - split.head) / V);
  for (uint32_t q = threadIdx.x; q < vectors; q += kThreads) vector(split.head + int64_t{q} * V);
  for (int64_t i = split.tail + threadIdx.x; i < chunk.end; i += kThreads) one(i);
}
// The tensor's half copy to write with its masters (none without a table: fp32).
__device__ __forceinline__ HalfCopy half_copy(const HalfCopy* halves, int32_t tensor) {
  return halves ? halves[tensor] : HalfCopy{};
}

__global__ void lamb_apply_kernel(const Chunk* chunks, int64_t count, const float* steps, const HalfCopy* halves,
                                  const float* update, float* w, const double* nonfinite) {
  if (skipped(nonfinite)) return;
  for (int64_t b = blockIdx.x; b < count; b += gridDim.x) {
    const Chunk chunk = chunks[b];
    const float step = steps[chunk.tensor];
    const HalfCopy h = half_copy(halves, chunk.tensor);
    each_in_chunk<4>(
        chunk, [&](int64_t i) { lamb_apply_vec_at<4>(i, step, h, update, w); },
        [&](int64_t i) { lamb_apply_half_at(i, step, h, update, w); });
  }
}

__global__ void adam_kernel(const Chunk* chunks, int64_t count, const AdamScalars* scalars, const HalfCopy* halves,
                            const float* g, float* m, float* v, float* w, const double* nonfinite) {
  if (skipped(nonfinite)) return;
  for (int64_t b = blockIdx.x; b < count; b += gridDim.x) {
    const Chunk chunk = chunks[b];
    const AdamScalars k = scalars[chunk.tensor];
    const HalfCopy h = half_copy(halves, chunk.tensor);
    each_in_chunk<4>(
        chunk, [&](int64_t i) { adam_vec_at<4>(i, k, h, g, m, v, w); },
        [&](int64_t i) { adam_half_at(i, k, h, g, m, v, w); });
  }
}

__global__ void sgd_keras_kernel(const Chunk* chunks, int64_t count, const SgdScalars* scalars, const HalfCopy* halves,
                                 const float* g, float* velocity, float* w, const double* nonfinite) {
  if (skipped(nonfinite)) return;
  const SgdScalars k = *scalars;
  for (int64_t b = blockIdx.x; b < count; b += gridDim.x) {
    const Chunk chunk = chunks[b];
    const HalfCopy h = half_copy(halves, chunk.tensor);
    each_in_chunk<4>(
        chunk, [&](int64_t i) { sgd_keras_vec_at<4>(i, k, h, g, velocity, w); },
        [&](int64_t i) { sgd_keras_half_at(i, k, h, g, velocity, w); });
  }
}

// The penalty: sum over tensors in order of l2 * (their sum of squares, over their chunks in order).
__global__ void l2_penalty_kernel(const double* partial, const int64_t* first_chunk, int32_t tensors,
                                  const double* l2, double* penalty) {
  double total = 0;
  for (int32_t t = 0; t < tensors; ++t) {
    if (l2[t] == 0) continue;
    double sum = 0;
    for (int64_t b = first_chunk[t]; b < first_chunk[t + 1]; ++b) sum += partial[b];
    total += l2[t] * sum;
  }
  *penalty = total;
}

bool fits_multi_tensor(const DeviceChunks& chunks, void* workspace, size_t bytes) {
  return workspace && bytes >= multi_tensor_workspace_bytes(chunks.count, chunks.tensors);
}

}  // namespace

// ---- per channel ----

namespace {
// x, dy and dx stored as T (one type), w, dw and db fp32.
template <class T>
cudaError_t channel_affine_bwd(cudaStream_t stream, int64_t rows, int64_t channels, const T* x, const float* w,
                               const T* dy, T* dx, float* dw, float* db, void* workspace, size_t workspace_bytes,
                               bool accumulate) {
  const ChannelScratch scratch = channel_scratch(workspace, workspace_bytes, 1, rows, channels);
  if ((dw || db) && !scratch.fits) return cudaErrorInvalidValue;
  if (dx)
    if (const cudaError_t e = each_row_channel<channel_affine_backward_data_at<T>>(stream, rows, channels, channels, w,
                                                                                  dy, dx, accumulate);
        e != cudaSuccess)
      return e;
  if (!dw && !db) return cudaSuccess;
  if (const cudaError_t e = channel_sums(stream, ChannelAffineParamTerm<T>{x, dy, channels}, 1, rows, channels,
                                         scratch.sums, workspace, workspace_bytes);
      e != cudaSuccess)
    return e;
  return each<channel_affine_params_at>(stream, channels, channels, static_cast<const double*>(scratch.sums), dw, db);
}
}  // namespace

cudaError_t channel_affine_backward(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                    const float* w, const float* dy, float* dx, float* dw, float* db, void* workspace,
                                    size_t workspace_bytes, bool accumulate) {
  return channel_affine_bwd(stream, rows, channels, x, w, dy, dx, dw, db, workspace, workspace_bytes, accumulate);
}

namespace {
// x and y stored as T (one type): the sums in double from x widened, the mean rounded once into T.
template <class T>
cudaError_t global_avg_pool_fwd(cudaStream_t stream, int64_t batch, int64_t positions, int64_t channels, const T* x,
                                T* y, void* workspace, size_t workspace_bytes) {
  const ChannelScratch scratch = channel_scratch(workspace, workspace_bytes, batch, positions, channels);
  if (const cudaError_t e = channel_sums(stream, SumTerm<T>{x, channels}, batch, positions, channels, scratch.sums,
                                         workspace, workspace_bytes);
      e != cudaSuccess)
    return e;
  return each<global_avg_pool_finish_at<T>>(stream, batch * channels, positions,
                                            static_cast<const double*>(scratch.sums), y);
}
}  // namespace

cudaError_t global_avg_pool_forward(cudaStream_t stream, int64_t batch, int64_t positions, int64_t channels,
                                    const float* x, float* y, void* workspace, size_t workspace_bytes) {
  return global_avg_pool_fwd(stream, batch, positions, channels, x, y, workspace, workspace_bytes);
}

// Activations and their gradients stored as T (float, or Bf16: bf16 activations, issue 33 item 4): one
// template per pass, the two overloads of launch.hpp below.
namespace {

template <class T>
cudaError_t bias_bwd(cudaStream_t stream, int64_t rows, int64_t channels, const T* dy, float* db, void* workspace,
                     size_t workspace_bytes) {
  const ChannelScratch scratch = channel_scratch(workspace, workspace_bytes, 1, rows, channels);
  if (const cudaError_t e = channel_sums(stream, SumTerm<T>{dy, channels}, 1, rows, channels, scratch.sums, workspace,
                                         workspace_bytes);
      e != cudaSuccess)
    return e;
  return each<bias_backward_at>(stream, channels, static_cast<const double*>(scratch.sums), db);
}

template <class T>
cudaError_t bn_sum(cudaStream_t stream, int64_t rows, int64_t channels, const T* x, double* stats, void* workspace,
                   size_t workspace_bytes) {
  return channel_sums(stream, SumTerm<T>{x, channels}, 1, rows, channels, stats, workspace, workspace_bytes,
                      stats + channels, static_cast<double>(rows));
}

template <class T>
cudaError_t bn_variance(cudaStream_t stream, int64_t rows, int64_t channels, const T* x, double* stats, void* workspace,
                        size_t workspace_bytes) {
  if (!channel_scratch(workspace, workspace_bytes, 1, rows, channels).fits) return cudaErrorInvalidValue;
  if (const cudaError_t e = each<batch_norm_mean_at>(stream, channels, channels, stats); e != cudaSuccess) return e;
  return channel_sums(stream, BatchNormDeviationTerm<T>{x, stats, channels}, 1, rows, channels, stats + channels + 1,
                      workspace, workspace_bytes);
}

template <class T>
cudaError_t bn_moments(cudaStream_t stream, int64_t rows, int64_t channels, const T* x, double* moments, void* workspace,
                       size_t workspace_bytes) {
  return channel_sums(stream, BatchNormMomentsTerm<T>{x, channels}, 1, rows, channels, moments, workspace,
                      workspace_bytes, moments + 2 * channels, static_cast<double>(rows));
}

template <class T>
cudaError_t bn_backward_sums(cudaStream_t stream, int64_t rows, int64_t channels, const T* x, const T* dy,
                             const float* saved, double* sums, void* workspace, size_t workspace_bytes) {
  return channel_sums(stream, BatchNormBackwardTerm<T>{x, dy, saved, channels}, 1, rows, channels, sums, workspace,
                      workspace_bytes, sums + 2 * channels, static_cast<double>(rows));
}

template <class T>
cudaError_t bn_backward_data(cudaStream_t stream, int64_t rows, int64_t channels, const T* x, const T* dy,
                             const float* gamma, const float* saved, const double* sums, float* coefficients, T* dx,
                             bool accumulate) {
  if (const cudaError_t e = each<batch_norm_backward_coefficients_at>(stream, channels, channels, sums, gamma, saved,
                                                                      coefficients);
      e != cudaSuccess)
    return e;
  return each_row_channel<batch_norm_backward_data_at<T>>(stream, rows, channels, channels, x, dy, saved,
                                                          static_cast<const float*>(coefficients), dx, accumulate);
}

}  // namespace

cudaError_t bias_backward(cudaStream_t stream, int64_t rows, int64_t channels, const float* dy, float* db,
                          void* workspace, size_t workspace_bytes) {
  return bias_bwd(stream, rows, channels, dy, db, workspace, workspace_bytes);
}

// ---- batch normalization ----

cudaError_t batch_norm_sum(cudaStream_t stream, int64_t rows, int64_t channels, const float* x, double* stats,
                           void* workspace, size_t workspace_bytes) {
  return bn_sum(stream, rows, channels, x, stats, workspace, workspace_bytes);
}

cudaError_t batch_norm_variance(cudaStream_t stream, int64_t rows, int64_t channels, const float* x, double* stats,
                                void* workspace, size_t workspace_bytes) {
  return bn_variance(stream, rows, channels, x, stats, workspace, workspace_bytes);
}

cudaError_t batch_norm_moments(cudaStream_t stream, int64_t rows, int64_t channels, const float* x, double* moments,
                               void* workspace, size_t workspace_bytes) {
  return bn_moments(stream, rows, channels, x, moments, workspace, workspace_bytes);
}

cudaError_t batch_norm_finalize_moments(cudaStream_t stream, int64_t channels, double eps, double momentum,
                                        const double* moments, const float* gamma, const float* beta,
                                        float* running_mean, float* running_var, float* saved, float* scale_shift) {
  return each<batch_norm_finalize_moments_at>(stream, channels, channels, eps, momentum, moments, gamma, beta,
                                              running_mean, running_var, saved, scale_shift);
}

cudaError_t batch_norm_finalize(cudaStream_t stream, int64_t channels, double eps, double momentum,
                                const double* stats, const float* gamma, const float* beta, float* running_mean,
                                float* running_var, float* saved, float* scale_shift) {
  return each<batch_norm_finalize_at>(stream, channels, channels, eps, momentum, stats, gamma, beta, running_mean,
                                      running_var, saved, scale_shift);
}

cudaError_t batch_norm_eval_coefficients(cudaStream_t stream, int64_t channels, double eps, const float* gamma,
                                         const float* beta, const float* running_mean, const float* running_var,
                                         float* scale_shift) {
  return each<batch_norm_eval_coefficients_at>(stream, channels, channels, eps, gamma, beta, running_mean, running_var,
                                               scale_shift);
}

cudaError_t batch_norm_apply(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                             const float* scale_shift, float* y) {
  return each_row_channel<batch_norm_apply_at<float>>(stream, rows, channels, channels, x, scale_shift, y);
}

cudaError_t batch_norm_backward_sums(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                     const float* dy, const float* saved, double* sums, void* workspace,
                                     size_t workspace_bytes) {
  return bn_backward_sums(stream, rows, channels, x, dy, saved, sums, workspace, workspace_bytes);
}

cudaError_t batch_norm_backward_params(cudaStream_t stream, int64_t channels, const double* sums, float* dgamma,
                                       float* dbeta) {
  return each<batch_norm_backward_params_at>(stream, channels, channels, sums, dgamma, dbeta);
}

cudaError_t batch_norm_backward_data(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                     const float* dy, const float* gamma, const float* saved, const double* sums,
                                     float* coefficients, float* dx, bool accumulate) {
  return bn_backward_data(stream, rows, channels, x, dy, gamma, saved, sums, coefficients, dx, accumulate);
}

// ---- losses and metrics ----

cudaError_t mse_forward(cudaStream_t stream, int64_t n, const float* prediction, const float* target, float* loss,
                        void* workspace, size_t workspace_bytes) {
  return flat_sums(stream, MseTerm{prediction, target}, n, StoreMse{loss, n}, workspace, workspace_bytes);
}

cudaError_t abs_error_sum(cudaStream_t stream, int64_t n, const float* prediction, const float* target, float* sum,
                          void* workspace, size_t workspace_bytes) {
  return flat_sums(stream, AbsErrorTerm{prediction, target}, n, StoreSum{sum}, workspace, workspace_bytes);
}

cudaError_t softmax_cross_entropy_forward(cudaStream_t stream, int64_t rows, int64_t classes, const float* logits,
                                          const int32_t* labels, const float* class_weights, float* loss,
                                          void* workspace, size_t workspace_bytes) {
  return flat_sums(stream, SoftmaxCrossEntropyTerm{logits, labels, class_weights, classes}, rows,
                   StoreCrossEntropy{loss, rows}, workspace, workspace_bytes);
}

cudaError_t iou_forward(cudaStream_t stream, int64_t batch, int64_t rows, int64_t classes, const float* logits,
                        const int32_t* labels, float* iou, void* workspace, size_t workspace_bytes) {
  if (batch <= 0 || rows % batch != 0) return cudaErrorInvalidValue;
  const int64_t pixels = rows / batch;
  const ChannelScratch scratch = channel_scratch(workspace, workspace_bytes, batch, pixels, classes);
  if (const cudaError_t e = channel_sums(stream, IouCountTerm{logits, labels, classes}, batch, pixels, classes,
                                         scratch.sums, workspace, workspace_bytes);
      e != cudaSuccess)
    return e;
  return each<iou_finish_at>(stream, batch, classes, static_cast<const double*>(scratch.sums), iou);
}

// ---- optimizers and regularization ----

cudaError_t sgd_keras(cudaStream_t stream, const DeviceChunks& chunks, const SgdScalars* scalars,
                      const HalfCopy* halves, const float* g, float* velocity, float* w, const double* nonfinite) {
  if (chunks.count > 0)
    sgd_keras_kernel<<<chunk_blocks(chunks.count), kThreads, 0, stream>>>(chunks.chunks, chunks.count, scalars, halves,
                                                                          g, velocity, w, nonfinite);
  return cudaGetLastError();
}

cudaError_t adam(cudaStream_t stream, const DeviceChunks& chunks, const AdamScalars* scalars, const HalfCopy* halves,
                 const float* g, float* m, float* v, float* w, const double* nonfinite) {
  if (chunks.count > 0)
    adam_kernel<<<chunk_blocks(chunks.count), kThreads, 0, stream>>>(chunks.chunks, chunks.count, scalars, halves, g, m,
                                                                     v, w, nonfinite);
  return cudaGetLastError();
}

cudaError_t lamb(cudaStream_t stream, const DeviceChunks& chunks, const LambScalars* scalars, double max_grad_norm,
                 const HalfCopy* halves, const float* g, float* m, float* v, float* w, float* update, void* workspace,
                 size_t workspace_bytes, const double* nonfinite) {
  if (!fits_multi_tensor(chunks, workspace, workspace_bytes)) return cudaErrorInvalidValue;
  if (chunks.count == 0) return cudaSuccess;
  auto* partial = static_cast<double*>(workspace);  // [2 * chunks]
  double* square_sum = partial + 2 * chunks.count;
  auto* clip = reinterpret_cast<float*>(square_sum + 1);
  auto* steps = reinterpret_cast<float*>(square_sum + 2);
  const double* none = nullptr;
  if (const cudaError_t e = chunk_sums(stream, GradientSquareTerm{g}, chunks, partial, none); e != cudaSuccess)
    return e;
  lamb_clip_kernel<<<1, 1, 0, stream>>>(partial, chunks.count, max_grad_norm, square_sum, clip);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (const cudaError_t e = chunk_sums(stream, LambMomentsTerm{scalars, clip, g, m, v, w, update}, chunks, partial,
                                       nonfinite);
      e != cudaSuccess)
    return e;
  lamb_steps_kernel<<<blocks_for(chunks.tensors), kThreads, 0, stream>>>(partial, chunks.first_chunk, chunks.tensors,
                                                                         scalars, steps);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  lamb_apply_kernel<<<chunk_blocks(chunks.count), kThreads, 0, stream>>>(chunks.chunks, chunks.count, steps, halves,
                                                                         update, w, nonfinite);
  return cudaGetLastError();
}

cudaError_t l2_regularize(cudaStream_t stream, const DeviceChunks& chunks, const double* l2, const float* w,
                          float* dw, double* penalty, void* workspace, size_t workspace_bytes) {
  if (!fits_multi_tensor(chunks, workspace, workspace_bytes)) return cudaErrorInvalidValue;
  auto* partial = static_cast<double*>(workspace);
  const double* none = nullptr;
  if (const cudaError_t e = chunk_sums(stream, L2Term{l2, w, dw}, chunks, partial, none); e != cudaSuccess) return e;
  l2_penalty_kernel<<<1, 1, 0, stream>>>(partial, chunks.first_chunk, chunks.tensors, l2, penalty);
  return cudaGetLastError();
}

// ---- fp16 loss scaling ----

cudaError_t unscale_gradients(cudaStream_t stream, int64_t n, float* g, const float* scale, double* nonfinite,
                              void* workspace, size_t workspace_bytes) {
  return flat_sums(stream, UnscaleTerm{g, scale}, n, StoreDouble{nonfinite}, workspace, workspace_bytes);
}

// The half-storage overloads of launch.hpp (bf16 and fp16: one template each above, instantiated for
// both types by the one list below).
#define MLPH_HALF_DEFINITIONS(H) \
cudaError_t bias_backward(cudaStream_t stream, int64_t rows, int64_t channels, const H* dy, float* db,          \
                          void* workspace, size_t workspace_bytes) {                                            \
  return bias_bwd(stream, rows, channels, dy, db, workspace, workspace_bytes);                                  \
}                                                                                                               \
cudaError_t batch_norm_sum(cudaStream_t stream, int64_t rows, int64_t channels, const H* x, double* stats,      \
                           void* workspace, size_t workspace_bytes) {                                           \
  return bn_sum(stream, rows, channels, x, stats, workspace, workspace_bytes);                                  \
}                                                                                                               \
cudaError_t batch_norm_variance(cudaStream_t stream, int64_t rows, int64_t channels, const H* x, double* stats, \
                                void* workspace, size_t workspace_bytes) {                                      \
  return bn_variance(stream, rows, channels, x, stats, workspace, workspace_bytes);                             \
}                                                                                                               \
cudaError_t batch_norm_moments(cudaStream_t stream, int64_t rows, int64_t channels, const H* x, double* moments, \
                               void* workspace, size_t workspace_bytes) {                                       \
  return bn_moments(stream, rows, channels, x, moments, workspace, workspace_bytes);                            \
}                                                                                                               \
cudaError_t batch_norm_apply(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,                   \
                             const float* scale_shift, H* y) {                                                  \
  return each_row_channel<batch_norm_apply_at<H>>(stream, rows, channels, channels, x, scale_shift, y);         \
}                                                                                                               \
cudaError_t batch_norm_backward_sums(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,           \
                                     const H* dy, const float* saved, double* sums, void* workspace,            \
                                     size_t workspace_bytes) {                                                  \
  return bn_backward_sums(stream, rows, channels, x, dy, saved, sums, workspace, workspace_bytes);              \
}                                                                                                               \
cudaError_t batch_norm_backward_data(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,           \
                                     const H* dy, const float* gamma, const float* saved, const double* sums,   \
                                     float* coefficients, H* dx, bool accumulate) {                             \
  return bn_backward_data(stream, rows, channels, x, dy, gamma, saved, sums, coefficients, dx, accumulate);     \
}                                                                                                               \
cudaError_t global_avg_pool_forward(cudaStream_t stream, int64_t batch, int64_t positions, int64_t channels,    \
                                    const H* x, H* y, void* workspace, size_t workspace_bytes) {                \
  return global_avg_pool_fwd(stream, batch, positions, channels, x, y, workspace, workspace_bytes);             \
}                                                                                                               \
cudaError_t channel_affine_backward(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,            \
                                    const float* w, const H* dy, H* dx, float* dw, float* db, void* workspace,  \
                                    size_t workspace_bytes, bool accumulate) {                                  \
  return channel_affine_bwd(stream, rows, channels, x, w, dy, dx, dw, db, workspace, workspace_bytes, accumulate); \
}

MLPH_HALF_DEFINITIONS(Bf16)
MLPH_HALF_DEFINITIONS(F16)
#undef MLPH_HALF_DEFINITIONS

}  // namespace mlph::cuda
