// What the cuda plan's tests share (tests/backends/cuda/plan/*_test.cpp): a graph built op by op and
// lowered, look-ups by name, the device's conv filter layout, the memory plan's overlap check, a small
// CosmoFlow and the real CosmoFlow and DeepCAM graphs. Inline functions in a named namespace: each test
// file uses a few of them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/program/lower.hpp"
#include "mlph/test/error_of.hpp"
#include "mlph/test/random.hpp"
#include "plan/plan.hpp"

#ifdef MLPH_HAVE_COSMOFLOW
#include "../../../../workloads/cosmoflow/model.hpp"
#endif
#ifdef MLPH_HAVE_DEEPCAM
#include "../../../../workloads/deepcam/model.hpp"
#endif

namespace mlph::cuda::plan::fixtures {

using Shape = std::vector<int64_t>;

using ::mlph::test::random_floats;

inline int64_t count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// A graph built op by op, with an mse loss on its last value.
struct Net {
  sdk::GraphBuilder g;
  std::vector<int32_t> inputs;

  int32_t input(const std::string& name, Shape shape, MLPH_DType dtype = MLPH_DTYPE_F32) {
    const int32_t v = g.value(name, dtype, std::move(shape));
    inputs.push_back(v);
    return v;
  }
  int32_t param(const std::string& name, Shape shape, uint32_t flags = MLPH_PARAM_TRAINABLE) {
    const int32_t v = g.value(name, MLPH_DTYPE_F32, shape);
    g.parameter(v, random_floats(static_cast<size_t>(count(shape)), static_cast<uint32_t>(v)), 0.0, 1.0, flags);
    return v;
  }
  int32_t op(const std::string& op, const std::string& name, std::vector<int32_t> in, Shape shape,
             std::vector<sdk::AttrInit> attrs = {}) {
    const int32_t y = g.value(name, MLPH_DTYPE_F32, std::move(shape));
    g.node(op, name, std::move(in), {y}, std::move(attrs));
    return y;
  }
  Shape shape(int32_t v) { return {g.value_info(v).shape, g.value_info(v).shape + g.value_info(v).ndim}; }
  // mse against a target input, sgd_keras.
  Program lower(int32_t prediction, sdk::Implements implements = implemented()) {
    const int32_t target = input("target", shape(prediction));
    g.loss(op("mse", "loss", {prediction, target}, {}));
    g.inputs(inputs);
    g.optimizer("sgd_keras", {{"momentum", 0.9}});
    return sdk::program::lower_graph(*g.graph(), implements);
  }
};

inline const Node& node_named(const Program& p, const std::string& name) {
  for (const Node& n : p.nodes)
    if (n.name == name) return n;
  throw std::runtime_error("no node " + name);
}
inline size_t index_of(const Program& p, const std::string& name) { return static_cast<size_t>(&node_named(p, name) - p.nodes.data()); }
inline int32_t value_named(const Program& p, const std::string& name) {
  for (size_t v = 0; v < p.values.size(); ++v)
    if (p.values[v].name == name) return static_cast<int32_t>(v);
  throw std::runtime_error("no value " + name);
}

using ::mlph::test::error_of;

// The graph's [rows, cols] weights as the device keeps them: [cols, rows].
inline std::vector<float> device_filter(const FilterDesc& f, const std::vector<float>& w) {
  std::vector<float> t(w.size());
  for (int64_t r = 0; r < f.rows; ++r)
    for (int64_t c = 0; c < f.cols; ++c) t[static_cast<size_t>(c * f.rows + r)] = w[static_cast<size_t>(r * f.cols + c)];
  return t;
}

// No two regions live at one step share a byte: every pair, every step. Offsets aligned, inside the arena.
inline void expect_no_overlap(const MemoryPlan& m, const Schedule& s) {
  for (const Region& r : m.regions) {
    ASSERT_EQ(r.offset % kAlignment, 0u) << r.name;
    ASSERT_EQ(r.bytes % kAlignment, 0u) << r.name;
    ASSERT_LE(r.offset + r.bytes, m.arena_bytes) << r.name;
    ASSERT_LE(r.first, r.last) << r.name;
  }
  for (int step = 0; step < static_cast<int>(s.steps.size()); ++step) {
    std::vector<const Region*> live;
    for (const Region& r : m.regions)
      if (r.live_at(step)) live.push_back(&r);
    for (size_t i = 0; i < live.size(); ++i)
      for (size_t j = i + 1; j < live.size(); ++j)
        ASSERT_TRUE(live[i]->offset + live[i]->bytes <= live[j]->offset || live[j]->offset + live[j]->bytes <= live[i]->offset)
            << "step " << step << ": '" << live[i]->name << "' and '" << live[j]->name << "' overlap";
  }
}

inline const Region& region_at(const MemoryPlan& m, const Location& at) { return m.regions[static_cast<size_t>(at.region)]; }

#ifdef MLPH_HAVE_COSMOFLOW
// The real CosmoFlow (128^3, the default settings) at `batch`, lowered.
inline Program cosmoflow_program(uint32_t batch) {
  sdk::GraphBuilder g;
  cosmoflow::build_model(g, cosmoflow::ModelSettings{}, 0.9, batch, 7);
  return sdk::program::lower_graph(*g.graph(), implemented());
}

// A CosmoFlow of edge 16 with two conv blocks of 4 and 8 filters.
inline Program mini_cosmoflow(int kernel = 3) {
  cosmoflow::ModelSettings m;
  m.edge = 16, m.n_conv_layers = 2, m.conv_size = 4, m.fc1_size = 8, m.fc2_size = 4, m.kernel_size = kernel;
  sdk::GraphBuilder g;
  cosmoflow::build_model(g, m, 0.9, 2, 7);
  return sdk::program::lower_graph(*g.graph(), implemented());
}
#endif

#ifdef MLPH_HAVE_DEEPCAM
// The real DeepCAM (768x1152, the default settings) at `batch`, lowered.
inline Program deepcam_program(uint32_t batch) {
  sdk::GraphBuilder g;
  deepcam::build_model(g, deepcam::DataSettings{}, deepcam::Normalization::identity(16), deepcam::OptimizerSettings{}, batch, 7);
  return sdk::program::lower_graph(*g.graph(), implemented());
}
#endif

}  // namespace mlph::cuda::plan::fixtures
