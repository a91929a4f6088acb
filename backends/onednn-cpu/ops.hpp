// The op builders: each gets a node the SDK's validator checked against docs/ops.md, chooses
// layouts, creates its primitives and memory, and returns an Op that runs them (forward and backward).
#pragma once

#include <memory>

#include "mlph/sdk/comms/spatial.hpp"
#include "mlph/sdk/host/batch_norm_groups.hpp"
#include "net.hpp"

namespace mlph::onednn {

// A conv followed only by a relu / leaky_relu (alpha >= 0) runs as one primitive with an eltwise
// post-op; the activation node then only does the backward (from its output: for alpha >= 0,
// y > 0 iff x > 0). A batch norm followed only by a relu runs it forward and backward
// (fuse_norm_relu); the activation node does nothing.
struct Fusion {
  bool active = false;
  float alpha = 0;
  int32_t activation_output = -1;
};

// What this backend refuses beyond the validator's rules: MLPH_UNIMPLEMENTED naming the node.
[[noreturn]] void unimplemented(const NodeView& n, const std::string& what);
// Weights, biases and batch-norm vectors must be parameters (they stay in the graph layout).
void require_param(Net& net, const NodeView& n, size_t input);

std::unique_ptr<Op> make_conv(Net& net, const NodeView& n, const Fusion& fusion);
std::unique_ptr<Op> make_conv_transpose(Net& net, const NodeView& n);
std::unique_ptr<Op> make_dense(Net& net, const NodeView& n);
std::unique_ptr<Op> make_max_pool(Net& net, const NodeView& n);
std::unique_ptr<Op> make_global_avg_pool(Net& net, const NodeView& n);
// CosmoFlow's conv -> leaky_relu -> max_pool on the SDK's fused body (pool_chain.cpp): whether it
// takes max_pool node `pool` reading z (the conv output: its layout must be known) with the
// activation's slope `alpha`; the activation node then only aliases z, and the pool op
// reads z, applies the activation and pools, forward and backward. make_pool_chain gives null
// where the body does not take the node.
bool pool_chain_takes(Net& net, const NodeView& pool, int32_t z, float alpha);
std::unique_ptr<Op> make_chained_activation(Net& net, const NodeView& n, int32_t conv_output);
std::unique_ptr<Op> make_pool_chain(Net& net, const NodeView& pool, int32_t z, float alpha);
std::unique_ptr<Op> make_eltwise(Net& net, const NodeView& n);  // relu, leaky_relu, tanh, scale
std::unique_ptr<Op> make_fused_activation(Net& net, const NodeView& n, int32_t conv_output, float alpha);
std::unique_ptr<Op> make_norm_fused_relu(Net& net, const NodeView& n, int32_t norm_output);
// `group`: the sum over this rank's batch-norm group (group_size > 1, SyncBatchNorm), else null.
std::unique_ptr<Op> make_batch_norm(Net& net, const NodeView& n, const Fusion& relu, const sdk::GroupSum* group);
std::unique_ptr<Op> make_add(Net& net, const NodeView& n);
std::unique_ptr<Op> make_concat(Net& net, const NodeView& n);

// Plain loops over the graph layout (ops_loops.cpp).
std::unique_ptr<Op> make_log1p(Net& net, const NodeView& n);
std::unique_ptr<Op> make_reshape(Net& net, const NodeView& n);
std::unique_ptr<Op> make_dropout(Net& net, const NodeView& n);
std::unique_ptr<Op> make_broadcast(Net& net, const NodeView& n);
std::unique_ptr<Op> make_channel_affine(Net& net, const NodeView& n);
std::unique_ptr<Op> make_shift_scale(Net& net, const NodeView& n);
std::unique_ptr<Op> make_mse(Net& net, const NodeView& n);
std::unique_ptr<Op> make_abs_error_sum(Net& net, const NodeView& n);
std::unique_ptr<Op> make_softmax_cross_entropy(Net& net, const NodeView& n);
std::unique_ptr<Op> make_iou(Net& net, const NodeView& n);
// halo_exchange, spatial_gather: over the communicator of the sample's ranks from `groups`.
std::unique_ptr<Op> make_spatial_op(Net& net, const NodeView& n, const MLPH_HostApi* host,
                                    sdk::RankGroups& groups);

}  // namespace mlph::onednn
