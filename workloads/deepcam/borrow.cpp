#include "borrow.hpp"

namespace mlph::deepcam {
namespace {

// DeepCAM logs the per-step hyperparameters as its config takes them (REFERENCE §2.8); the schema
// holds the rules (opt_eps and opt_max_grad_norm fixed, opt_name Adam/AdamW/LAMB...), which the
// core applies to the config keys.
constexpr sdk::HparamRule kRules[] = {
    {"global_batch_size", "train.batch_size", sdk::per_rank_batch},
    {"batchnorm_group_size", "train.batchnorm_group_size", sdk::as_is},
    {"gradient_accumulation_frequency", "train.gradient_accumulation_frequency", sdk::as_is},
    {"opt_name", "optimizer.name", sdk::as_word},
    {"opt_lr", "optimizer.lr", sdk::as_is},
    {"opt_betas", "optimizer.betas", sdk::as_is},
    {"opt_eps", "optimizer.eps", sdk::as_is},
    {"opt_weight_decay", "optimizer.weight_decay", sdk::as_is},
    {"opt_max_grad_norm", "optimizer.max_grad_norm", sdk::as_is},
    {"scheduler_type", "scheduler.type", sdk::as_word},
    {"scheduler_milestones", "scheduler.milestones", sdk::as_is},
    {"scheduler_decay_rate", "scheduler.decay_rate", sdk::as_is},
    {"scheduler_t_max", "scheduler.t_max", sdk::as_is},
    {"scheduler_eta_min", "scheduler.eta_min", sdk::as_is},
    {"scheduler_lr_warmup_steps", "scheduler.lr_warmup_steps", sdk::as_is},
    {"scheduler_lr_warmup_factor", "scheduler.lr_warmup_factor", sdk::as_is},
};

}  // namespace

std::span<const sdk::HparamRule> hparam_rules() { return kRules; }

}  // namespace mlph::deepcam
