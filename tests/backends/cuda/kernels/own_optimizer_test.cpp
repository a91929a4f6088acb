// The update's own pass (kernels/optimizer.hpp, precision.hpp): 16-byte vectors, the half copy, the
// vector casts.
#include "own_fixtures.hpp"

namespace mlph::cuda {
namespace {

// ---- the update's own pass: 16-byte vectors and the half copy (issue 33 items 7 and 8) -----------

// A chunk as the optimizer kernels walk it (reductions.cu each_in_chunk): vector_split's head and
// tail one by one, its middle V at a time.
template <int V, class Vector, class One>
void each_in_chunk(const Chunk& c, Vector vector, One one) {
  const VectorSplit s = vector_split(c.begin, c.end, V);
  ASSERT_TRUE(s.head >= c.begin && s.head - c.begin < V && s.tail <= c.end && c.end - s.tail < V)
      << c.begin << ".." << c.end;
  ASSERT_TRUE(s.head == c.end || s.head % V == 0) << c.begin;
  ASSERT_EQ((s.tail - s.head) % V, 0) << c.begin;
  for (int64_t i = c.begin; i < s.head; ++i) one(i);
  for (int64_t i = s.head; i < s.tail; i += V) vector(i);
  for (int64_t i = s.tail; i < c.end; ++i) one(i);
}

// Four tensors at odd offsets (every chunk's head and tail misaligned), chunks of 256: none, bf16, a
// one-element fp16, and a [682, 3] weight whose bf16 copy is padded to [682, 8] (plan::pad_channels).
struct HalfCopies {
  std::vector<TensorSlice> slices = {{0, 5}, {5, 701}, {706, 1}, {707, 2046}};
  ChunkTable table = make_chunks(slices, 256);
  int64_t n = 2753;
  static constexpr uint16_t kUnwritten = 0xdead;
  std::vector<uint16_t> copy1 = std::vector<uint16_t>(701, kUnwritten), copy2 = std::vector<uint16_t>(1, kUnwritten),
                        copy3 = padded_copy();
  std::vector<HalfCopy> halves = {HalfCopy{},
                                  {copy1.data(), 5, FloatType::bf16, 0, 0},
                                  {copy2.data(), 706, FloatType::f16, 0, 0},
                                  {copy3.data(), 707, FloatType::bf16, 3, 8}};

  // What the cast of a host write leaves: zeros in channels 3-7 (here the master's channels unwritten).
  static std::vector<uint16_t> padded_copy() {
    std::vector<uint16_t> copy(682 * 8, 0);
    for (size_t r = 0; r < 682; ++r)
      for (size_t c = 0; c < 3; ++c) copy[r * 8 + c] = kUnwritten;
    return copy;
  }
  // Each copy holds its tensor's masters w, rounded; the padding still zero.
  void expect_rounded(const std::vector<float>& w, const std::string& what) const {
    for (int64_t j = 0; j < 701; ++j)
      ASSERT_EQ(copy1[static_cast<size_t>(j)], float_to_bfloat16(w[static_cast<size_t>(5 + j)])) << what << " bf16 " << j;
    ASSERT_EQ(copy2[0], float_to_half(w[706])) << what << " fp16";
    for (int64_t r = 0; r < 682; ++r)
      for (int64_t c = 0; c < 8; ++c)
        ASSERT_EQ(copy3[static_cast<size_t>(r * 8 + c)], c < 3 ? float_to_bfloat16(w[static_cast<size_t>(707 + r * 3 + c)]) : 0)
            << what << " padded " << r << ", " << c;
  }
  template <class Vector, class One>
  void each_chunk(Vector vector, One one) const {
    for (const Chunk& c : table.chunks)
      each_in_chunk<4>(
          c, [&](int64_t i) { vector(i, halves[static_cast<size_t>(c.tensor)]); },
          [&](int64_t i) { one(i, halves[static_cast<size_t>(c.tensor)]); });
  }
};

TEST(CudaOwnKernels, OptimizerPassesWriteTheMastersBitsAndTheirRoundedHalfCopies) {
  {  // SGD with momentum (CosmoFlow)
    HalfCopies h;
    const std::vector<float> g = random_floats(static_cast<size_t>(h.n), 901), w0 = random_floats(static_cast<size_t>(h.n), 902);
    const std::vector<float> v0 = random_floats(static_cast<size_t>(h.n), 903);
    const SgdScalars k = sgd_scalars(0.05, 0.9);
    std::vector<float> w = w0, v = v0, expected_w = w0, expected_v = v0;
    each(h.n, [&](int64_t i) { sgd_keras_at(i, k, g.data(), expected_v.data(), expected_w.data()); });
    h.each_chunk([&](int64_t i, const HalfCopy& c) { sgd_keras_vec_at<4>(i, k, c, g.data(), v.data(), w.data()); },
                 [&](int64_t i, const HalfCopy& c) { sgd_keras_half_at(i, k, c, g.data(), v.data(), w.data()); });
    expect_same_bits(w, expected_w, "sgd masters");
    expect_same_bits(v, expected_v, "sgd velocity");
    h.expect_rounded(w, "sgd");
  }
  for (bool decoupled : {false, true}) {  // Adam, AdamW
    HalfCopies h;
    const std::vector<float> g = random_floats(static_cast<size_t>(h.n), 911), w0 = random_floats(static_cast<size_t>(h.n), 912);
    const std::vector<float> m0 = random_floats(static_cast<size_t>(h.n), 913), v0 = random_floats(static_cast<size_t>(h.n), 914, 0.0f, 1.0f);
    std::vector<AdamScalars> k;
    for (double decay : {0.01, 0.0, 0.5, 0.02}) k.push_back(adam_scalars(1e-2, 0.9, 0.999, 1e-8, 3, decay, decoupled));
    std::vector<float> w = w0, m = m0, v = v0, expected_w = w0, expected_m = m0, expected_v = v0;
    for (const Chunk& c : h.table.chunks)
      for (int64_t i = c.begin; i < c.end; ++i)
        adam_at(i, k[static_cast<size_t>(c.tensor)], g.data(), expected_m.data(), expected_v.data(), expected_w.data());
    for (const Chunk& c : h.table.chunks) {
      const AdamScalars& kc = k[static_cast<size_t>(c.tensor)];
      const HalfCopy& hc = h.halves[static_cast<size_t>(c.tensor)];
      each_in_chunk<4>(
          c, [&](int64_t i) { adam_vec_at<4>(i, kc, hc, g.data(), m.data(), v.data(), w.data()); },
          [&](int64_t i) { adam_half_at(i, kc, hc, g.data(), m.data(), v.data(), w.data()); });
    }
    expect_same_bits(w, expected_w, "adam masters");
    expect_same_bits(m, expected_m, "adam m");
    expect_same_bits(v, expected_v, "adam v");
    h.expect_rounded(w, decoupled ? "adamw" : "adam");
  }
  {  // LAMB's apply (DeepCAM): its per-tensor step
    HalfCopies h;
    const std::vector<float> u = random_floats(static_cast<size_t>(h.n), 921), w0 = random_floats(static_cast<size_t>(h.n), 922);
    const float steps[] = {1e-3f, 2e-2f, 0.5f, 3e-3f};
    std::vector<float> w = w0, expected_w = w0;
    for (const Chunk& c : h.table.chunks)
      for (int64_t i = c.begin; i < c.end; ++i) lamb_apply_at(i, steps[c.tensor], u.data(), expected_w.data());
    for (const Chunk& c : h.table.chunks) {
      const HalfCopy& hc = h.halves[static_cast<size_t>(c.tensor)];
      each_in_chunk<4>(
          c, [&](int64_t i) { lamb_apply_vec_at<4>(i, steps[c.tensor], hc, u.data(), w.data()); },
          [&](int64_t i) { lamb_apply_half_at(i, steps[c.tensor], hc, u.data(), w.data()); });
    }
    expect_same_bits(w, expected_w, "lamb masters");
    h.expect_rounded(w, "lamb");
  }
}

// The casts 8 at a time (16-byte accesses on both sides) are convert_at's bits, every pair of types,
// specials included; a length that leaves a tail of 5.
TEST(CudaOwnKernels, CastVectorsAreTheScalarCastsBits) {
  const int64_t n = 8 * 9 + 5;
  const std::vector<float> x = special_floats(static_cast<size_t>(n), 931);
  for (FloatType from : {FloatType::f32, FloatType::bf16, FloatType::f16}) {
    std::vector<uint32_t> source(static_cast<size_t>(n));  // room for either width
    for (int64_t i = 0; i < n; ++i) store_float(from, source.data(), i, x[static_cast<size_t>(i)]);
    for (FloatType to : {FloatType::f32, FloatType::bf16, FloatType::f16}) {
      std::vector<uint32_t> expected(static_cast<size_t>(n), 0x5a5a5a5au), actual = expected;
      each(n, [&](int64_t i) { convert_at(i, from, source.data(), to, expected.data()); });
      for (int64_t i = 0; i + 8 <= n; i += 8) convert_vec_at<8>(i, from, source.data(), to, actual.data());
      for (int64_t i = n / 8 * 8; i < n; ++i) convert_at(i, from, source.data(), to, actual.data());
      EXPECT_EQ(actual, expected) << static_cast<int>(from) << " -> " << static_cast<int>(to);
    }
    const std::vector<float> sum0 = random_floats(static_cast<size_t>(n), 932);
    std::vector<float> sum = sum0, expected_sum = sum0;
    each(n, [&](int64_t i) { convert_add_at(i, from, source.data(), expected_sum.data()); });
    for (int64_t i = 0; i + 8 <= n; i += 8) convert_add_vec_at<8>(i, from, source.data(), sum.data());
    for (int64_t i = n / 8 * 8; i < n; ++i) convert_add_at(i, from, source.data(), sum.data());
    expect_same_bits(sum, expected_sum, "convert_add");
    // The first writer (accumulate false) over what the sum held: 0 + dx, a memset's and an add's bits.
    std::vector<float> zeros(static_cast<size_t>(n), 0.0f), written = sum0;
    each(n, [&](int64_t i) { convert_add_at(i, from, source.data(), zeros.data()); });
    for (int64_t i = 0; i + 8 <= n; i += 8) convert_add_vec_at<8>(i, from, source.data(), written.data(), false);
    for (int64_t i = n / 8 * 8; i < n; ++i) convert_add_at(i, from, source.data(), written.data(), false);
    expect_same_bits(written, zeros, "convert_add written first");
  }
}

}  // namespace
}  // namespace mlph::cuda
