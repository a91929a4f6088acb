// DeepCAM's step-based learning rate (REFERENCE §2.4, §2.10), with the reference's off-by-ones:
// the PyTorch schedulers are built with last_epoch = 0 and their constructor steps once, so
// optimizer step k (0-based) uses the lr the scheduler computes at t = k + 1 (t = k for the
// warm-up-free cosine, which is built with last_epoch = -1).
//   W = 0, multistep: lr = lr0 * decay^(number of milestones m with 1 <= m <= t)
//   W = 0, cosine:    lr = eta + (lr0 - eta) * (1 + cos(pi k / T)) / 2
//   W > 0, t < W:     lr = lr0 * t / W  (factor f = 1)  or  lr0 * ((f - 1) t / W + 1)
//   W > 0, t >= W:    the decay phase starts from the current lr, the plateau P = lr(t = W - 1)
//                     (lr0 when W = 1); multistep milestones are shifted to m + W + 1; cosine is
//                     eta + (P - eta)(1 + cos(pi e / T))/2 with e = t - W, and after T the reference's
//                     recursion restarts from lr0 instead of P: eta + (lr0 - eta)(1 + cos(pi e / T))/2.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "settings.hpp"

namespace mlph::deepcam {

// The learning rate of optimizer step `step` (0-based, counted over the whole run).
double learning_rate(const ScheduleSettings& s, uint64_t step);

// The hyperparameter lines the reference logs (REFERENCE §2.8), in its order after
// global_batch_size: key and JSON value.
std::vector<std::pair<std::string, std::string>> hyperparameter_log(const Settings& s);

}  // namespace mlph::deepcam
