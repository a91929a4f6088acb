// The optimizers over the flat trainable buffers (kernels/optimizer.hpp): chunks, SGD, Adam(W),
// LAMB, L2; and the reductions' shapes they and the channel sums use (kernels/reduce.hpp).
#include "math_fixtures.hpp"

namespace mlph::cuda {
namespace {

// ---- optimizers over the flat trainable buffers ----------------------------------------------------

// Four trainable tensors of DeepCAM-like variety, chunked small so that tensors span several chunks.
struct FlatParams {
  std::vector<TensorSlice> slices;
  std::vector<double> multipliers;  // MLPH_Parameter.weight_decay
  ChunkTable table;
  int64_t n = 0;

  FlatParams() {
    const int64_t counts[] = {5, 700, 1, 2049};
    const double decay[] = {1.0, 0.0, 0.5, 1.0};
    for (size_t t = 0; t < std::size(counts); ++t) {
      slices.push_back({n, counts[t]});
      multipliers.push_back(decay[t]);
      n += counts[t];
    }
    table = make_chunks(slices, 256);
  }
  template <class F>
  void each_chunk(F&& body) const {
    for (const Chunk& chunk : table.chunks)
      for (int64_t i = chunk.begin; i < chunk.end; ++i) body(i, chunk.tensor);
  }
};

TEST(CudaKernelBodies, ChunksCoverEveryTensorInOrderWithoutStraddling) {
  const std::vector<TensorSlice> slices = {{0, 5}, {5, 0}, {5, 600}, {605, 256}, {861, 1}};
  const ChunkTable table = make_chunks(slices, 256);
  ASSERT_EQ(table.first_chunk, (std::vector<int64_t>{0, 1, 1, 4, 5, 6}));
  int64_t next = 0;
  for (size_t b = 0; b < table.chunks.size(); ++b) {
    const Chunk& chunk = table.chunks[b];
    const TensorSlice& slice = slices[static_cast<size_t>(chunk.tensor)];
    EXPECT_EQ(chunk.begin, next) << b;
    EXPECT_GT(chunk.end, chunk.begin) << b;
    EXPECT_LE(chunk.end - chunk.begin, 256) << b;
    EXPECT_GE(chunk.begin, slice.offset) << b;
    EXPECT_LE(chunk.end, slice.offset + slice.count) << b;
    EXPECT_GE(static_cast<int64_t>(b), table.first_chunk[static_cast<size_t>(chunk.tensor)]) << b;
    EXPECT_LT(static_cast<int64_t>(b), table.first_chunk[static_cast<size_t>(chunk.tensor) + 1]) << b;
    next = chunk.end;
  }
  EXPECT_EQ(next, 862);
}

TEST(CudaKernelBodies, SgdKerasStepsAreTheReferenceBits) {
  const FlatParams p;
  std::vector<float> w = random_floats(static_cast<size_t>(p.n), 110), velocity(static_cast<size_t>(p.n), 0.0f);
  std::vector<float> expected_w = w, expected_velocity = velocity;
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = random_floats(static_cast<size_t>(p.n), 111 + static_cast<uint32_t>(step));
    const double lr = 0.01 * (step + 1), momentum = 0.9;
    const SgdScalars k = sgd_scalars(lr, momentum);
    each(p.n, [&](int64_t i) { sgd_keras_at(i, k, g.data(), velocity.data(), w.data()); });
    ref::sgd_keras_update(pool(), p.n, lr, momentum, g.data(), expected_velocity.data(), expected_w.data());
  }
  expect_same_bits(w, expected_w, "sgd_keras weights");
  expect_same_bits(velocity, expected_velocity, "sgd_keras velocity");
}

TEST(CudaKernelBodies, AdamAndAdamWStepsWithPerTensorDecayAreTheReferenceBits) {
  const FlatParams p;
  const sdk::program::AdamAttrs attrs{0.9, 0.999, 1e-8, 0.01, 1.0};
  for (bool decoupled : {false, true}) {
    std::vector<float> w = random_floats(static_cast<size_t>(p.n), 120), m(w.size(), 0.0f), v(w.size(), 0.0f);
    std::vector<float> expected_w = w, expected_m = m, expected_v = v;
    for (uint64_t t = 1; t <= 3; ++t) {
      const std::vector<float> g = random_floats(w.size(), 121 + static_cast<uint32_t>(t));
      const double lr = 1e-3 * static_cast<double>(t);
      std::vector<AdamScalars> scalars;
      for (size_t i = 0; i < p.slices.size(); ++i)
        scalars.push_back(adam_scalars(lr, attrs.beta1, attrs.beta2, attrs.eps, t,
                                       attrs.weight_decay * p.multipliers[i], decoupled));
      p.each_chunk([&](int64_t i, int32_t tensor) {
        adam_at(i, scalars[static_cast<size_t>(tensor)], g.data(), m.data(), v.data(), w.data());
      });
      for (size_t i = 0; i < p.slices.size(); ++i) {
        const size_t o = static_cast<size_t>(p.slices[i].offset);
        ref::adam_update(pool(), p.slices[i].count, lr, attrs, t, attrs.weight_decay * p.multipliers[i], decoupled,
                         g.data() + o, expected_m.data() + o, expected_v.data() + o, expected_w.data() + o);
      }
    }
    expect_same_bits(w, expected_w, decoupled ? "adamw weights" : "adam weights");
    expect_same_bits(m, expected_m, "adam m");
    expect_same_bits(v, expected_v, "adam v");
  }
}

// LAMB's clip and trust ratios come from sums of squares (the device sums per chunk): within kSumTolerance.
TEST(CudaKernelBodies, LambStepsWithClippingAndTrustRatiosMatchTheReference) {
  const FlatParams p;
  const sdk::program::AdamAttrs attrs{0.9, 0.999, 1e-6, 0.01, 0.5};  // max_grad_norm 0.5: the gradients are clipped
  std::vector<float> w = random_floats(static_cast<size_t>(p.n), 130), m(w.size(), 0.0f), v(w.size(), 0.0f);
  std::vector<float> expected_w = w, expected_m = m, expected_v = v, update(w.size()), scratch(w.size());
  for (uint64_t t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_floats(w.size(), 131 + static_cast<uint32_t>(t));
    const double lr = 2e-3 * static_cast<double>(t);
    std::vector<LambScalars> scalars;
    for (size_t i = 0; i < p.slices.size(); ++i)
      scalars.push_back(lamb_scalars(lr, attrs.beta1, attrs.beta2, attrs.eps, t, attrs.weight_decay * p.multipliers[i]));

    // 1. the gradients' square sum (per chunk, chunks in order) and the clip;
    const std::vector<double> squares =
        test::chunk_sums<1>(p.table, [&](int64_t i, int32_t, double* s) { s[0] = square(g[static_cast<size_t>(i)]); });
    double square_sum = 0;
    for (double s : squares) square_sum += s;
    const float clip = lamb_clip(square_sum, attrs.max_grad_norm);
    // 2. moments and update, summing ||p||^2 and ||u||^2 per chunk; 3. per tensor the step; 4. apply.
    const std::vector<double> norms = test::chunk_sums<2>(p.table, [&](int64_t i, int32_t tensor, double* s) {
      lamb_moments_at(i, scalars[static_cast<size_t>(tensor)], clip, g.data(), m.data(), v.data(), w.data(),
                      update.data());
      s[0] = square(w[static_cast<size_t>(i)]), s[1] = square(update[static_cast<size_t>(i)]);
    });
    std::vector<float> steps;
    for (size_t i = 0; i < p.slices.size(); ++i) {
      double p_square = 0, u_square = 0;
      for (int64_t b = p.table.first_chunk[i]; b < p.table.first_chunk[i + 1]; ++b)
        p_square += norms[static_cast<size_t>(2 * b)], u_square += norms[static_cast<size_t>(2 * b + 1)];
      steps.push_back(lamb_step(scalars[i], p_square, u_square));
    }
    p.each_chunk([&](int64_t i, int32_t tensor) {
      lamb_apply_at(i, steps[static_cast<size_t>(tensor)], update.data(), w.data());
    });

    const double norm = ref::l2_norm(pool(), p.n, g.data());
    ASSERT_GT(norm, attrs.max_grad_norm) << "the test means to clip";
    const float expected_clip = static_cast<float>(norm / attrs.max_grad_norm);
    expect_near(clip, expected_clip, "lamb clip");
    for (size_t i = 0; i < p.slices.size(); ++i) {
      const size_t o = static_cast<size_t>(p.slices[i].offset);
      ref::lamb_update(pool(), p.slices[i].count, lr, attrs, t, attrs.weight_decay * p.multipliers[i], expected_clip,
                       g.data() + o, expected_m.data() + o, expected_v.data() + o, expected_w.data() + o,
                       scratch.data());
    }
  }
  expect_near(w, expected_w, "lamb weights");
  expect_near(m, expected_m, "lamb m");
  expect_near(v, expected_v, "lamb v");
}

TEST(CudaKernelBodies, L2GradientIsTheReferenceBitsAndPenaltyItsSum) {
  const FlatParams p;
  const std::vector<double> l2 = {1e-4, 0.0, 0.5, 2e-3};
  const std::vector<float> w = random_floats(static_cast<size_t>(p.n), 140);
  std::vector<float> dw = random_floats(w.size(), 141), expected_dw = dw;
  const std::vector<double> squares = test::chunk_sums<1>(p.table, [&](int64_t i, int32_t tensor, double* s) {
    const double l = l2[static_cast<size_t>(tensor)];
    s[0] = 0;
    if (l == 0) return;
    l2_gradient_at(i, l, w.data(), dw.data());
    s[0] = square(w[static_cast<size_t>(i)]);
  });
  double penalty = 0, expected_penalty = 0;
  for (size_t t = 0; t < p.slices.size(); ++t) {
    if (l2[t] == 0) continue;
    double sum = 0;
    for (int64_t b = p.table.first_chunk[t]; b < p.table.first_chunk[t + 1]; ++b) sum += squares[static_cast<size_t>(b)];
    penalty += l2[t] * sum;
    const size_t o = static_cast<size_t>(p.slices[t].offset);
    expected_penalty += ref::l2_penalty(pool(), p.slices[t].count, l2[t], w.data() + o);
    ref::l2_backward(pool(), p.slices[t].count, l2[t], w.data() + o, expected_dw.data() + o);
  }
  expect_same_bits(dw, expected_dw, "l2 gradient");
  EXPECT_NEAR(penalty, expected_penalty, 1e-12 * expected_penalty) << "l2 penalty (double sums, reordered)";
}

// ---- the reductions' shapes -----------------------------------------------------------------------

TEST(CudaKernelBodies, ReductionPartsDependOnSizesOnlyAndFitTheirWorkspace) {
  // DeepCAM-sized batch norms, a single channel, CosmoFlow's tiny loss.
  EXPECT_EQ(channel_parts(1, 2 * 768 * 1152, 64), 512);
  EXPECT_EQ(channel_parts(1, 2 * 48 * 72, 2048), 16);
  EXPECT_EQ(channel_parts(1, 100, 1), 1);
  EXPECT_EQ(channel_parts(1, int64_t{1} << 40, 1), 1024);
  EXPECT_EQ(flat_parts(4), 1);
  EXPECT_EQ(flat_parts(8193), 2);
  EXPECT_EQ(flat_parts(56'000'000), 1024);
  // The workspace holds the partials and the sums of K <= 3 terms.
  const int64_t parts = channel_parts(4, 1000, 40);
  EXPECT_EQ(channel_sums_workspace_bytes(4, 1000, 40), static_cast<size_t>((parts + 1) * 4 * 3 * 40) * sizeof(double));
  EXPECT_EQ(flat_sums_workspace_bytes(20000), static_cast<size_t>(4 * 3) * sizeof(double));
}

}  // namespace
}  // namespace mlph::cuda
