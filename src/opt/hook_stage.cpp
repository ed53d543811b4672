#include "tensorgrad/opt/hook_stage.h"

#include <string>

#include "opt/context_parts.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/opt/optimizer_context.h"

namespace tensorgrad {

void OptimizerContext::release_gradient_views() {
  buffer_.flat_ = Tensor{};
  buffer_.tensors_.clear();
  arena_grads_.clear();
}

// Clipping, the hooks and the optimizer update over the period's complete
// gradients (the second half of a training step).
void OptimizerContext::apply_update(OptimizerPlan& plan, float rows) {
  // A hook may change the model (compile, free, freeze_bn_stats, ...),
  // which retires this context: the plan, the state and the hook lists
  // are held here until the hooks are done, and the update is then not
  // applied. Copies of shared_ptrs: no allocation.
  const std::shared_ptr<OptimizerState> state = state_;
  const std::shared_ptr<const std::vector<AnyGradientHook>> model_hooks = options_.model_hooks;
  dist::Communicator* const comm = distributed() ? state->communicator.get() : nullptr;
  // Without accumulation or clipping the gradients are arena outputs: with
  // hooks or ranks to reduce over, they are copied into the flat buffer and
  // back for the update (two backend copies per update, only then); else
  // nothing touches them.
  const bool copy_through =
      !plan.persistent_grads && (comm || (model_hooks && !model_hooks->empty()) || !hooks_.empty());
  auto call = [this](const AnyGradientHook& hook) {
    if (const GradientHook* h = std::get_if<GradientHook>(&hook)) (*h)(buffer_.tensors());
    else std::get<GradientBucketHook>(hook)(buffer_);
  };
  in_hook_stage_ = true;
  try {
    if (copy_through)
      for (size_t k = 0; k < arena_grads_.size(); ++k) buffer_.tensors_[k].grad.copy_from(arena_grads_[k]);
    // The hook stage's order (DESIGN.md): the reduction across ranks, then
    // clipping (graph ops over the accumulators; none without them), then
    // the user's hooks.
    // A plan with a seed accumulated row-sums (the seed was the rows); else
    // the buffer holds means.
    if (comm) reduce_over_ranks(*comm, rows, plan.accumulation_scale.valid());
    plan.exe->run(plan.split, plan.clip_end);
    if (model_hooks)
      for (size_t i = 0; i < model_hooks->size() && retired_.empty(); ++i) call((*model_hooks)[i]);
    for (size_t i = 0; i < hooks_.size() && retired_.empty(); ++i) call(hooks_[i]);
  } catch (...) {
    in_hook_stage_ = false;
    // The period's gradients are dropped, so the next period starts clean.
    state->micro_step = 0;
    if ((plan.persistent_grads || state->gradients_accumulate) && retired_.empty()) state->gradients.fill(0.0f);
    if (!retired_.empty()) release_gradient_views();
    throw;
  }
  in_hook_stage_ = false;
  if (!retired_.empty()) {
    release_gradient_views();
    state->micro_step = 0;
    throw StateError("a gradient hook changed the model during a step (" + retired_ +
                     "): this step's update was not applied; change the model between steps");
  }
  if (copy_through) {
    for (size_t k = 0; k < arena_grads_.size(); ++k) arena_grads_[k].copy_from(buffer_.tensors_[k].grad);
    // Another graph of the model accumulates into the buffer: leave it zero.
    if (state->gradients_accumulate) state->gradients.fill(0.0f);
  }
  plan.exe->run(plan.clip_end);
  state_->micro_step = 0;
}

// The data-parallel reduction (issue 14), over the flat buffer holding this
// rank's gradient over `rows` rows, as a row-sum s_r (`row_sums`) or a mean
// g_r (then made the row-sum rows * g_r first): every rank sends s_r and
// its rows bucket by bucket (dist::reduce_buckets, the same cut as the
// hooks' GradientBuffer), the rows riding in the last bucket's message; the
// sums come back identical on every rank, and the gradient becomes sum(s_r)
// / sum(rows_r): the mean over the global batch, a short one included.
void OptimizerContext::reduce_over_ranks(dist::Communicator& comm, float rows, bool row_sums) {
  Tensor& message = state_->gradients_with_rows;
  // MPI reduces host memory: a device's gradients travel through a host
  // copy (device collectives, as NCCL's, are not built).
  const bool on_device = message.device() != Device::CPU;
  if (on_device) {
    host_message_.resize(size_t(message.numel()));
    message.copy_to_host(host_message_.data(), message.nbytes());
  }
  float* p = on_device ? host_message_.data() : message.data<float>();
  const size_t n = size_t(message.numel()) - 1;
  if (!row_sums)
    for (size_t i = 0; i < n; ++i) p[i] *= rows;
  p[n] = rows;
  dist::reduce_buckets(comm, std::span<float>(p, n + 1), buffer_.bucket_bytes(), 1);
  const float total = p[n];
  if (!(total > 0.0f))
    throw StateError("data-parallel update with no rows on any rank: every rank joined without a batch");
  const float inv = 1.0f / total;
  for (size_t i = 0; i < n; ++i) p[i] *= inv;
  if (on_device) message.copy_from_host(p, message.nbytes());
}

void OptimizerContext::add_gradient_hook(GradientHook hook) {
  if (!hook) throw ValueError("add_gradient_hook: empty hook");
  hooks_.emplace_back(std::in_place_type<GradientHook>, std::move(hook));
}

void OptimizerContext::add_gradient_bucket_hook(GradientBucketHook hook) {
  if (!hook) throw ValueError("add_gradient_bucket_hook: empty hook");
  hooks_.emplace_back(std::in_place_type<GradientBucketHook>, std::move(hook));
}

void OptimizerContext::set_gradient_bucket_bytes(size_t bytes) {
  check_gradient_bucket_bytes(bytes, "gradient_bucket_bytes");
  options_.gradient_bucket_bytes = bytes;
  buffer_.bucket_bytes_ = bytes;
}

void check_gradient_bucket_bytes(size_t bytes, const char* where) {
  if (bytes == 0 || bytes % 4 != 0)
    throw ValueError(std::string(where) + " must be a positive multiple of 4 (buckets hold whole float32 "
                     "gradients; the default is 25 MiB, " + std::to_string(kDefaultGradientBucketBytes) +
                     " bytes); got " + std::to_string(bytes));
}

std::pair<int64_t, int64_t> GradientBuffer::bucket_range(size_t k) const {
  const size_t n = n_buckets();
  if (k >= n)
    throw IndexError("gradient bucket " + std::to_string(k) + " is out of range: the buffer of " +
                     std::to_string(bytes()) + " bytes has " + std::to_string(n) + " bucket(s) of at most " +
                     std::to_string(bucket_bytes_) + " bytes (0 before the first step); use k < n_buckets()");
  const auto [begin, end] = dist::bucket_range(size_t(flat_.numel()), bucket_bytes_, k);
  return {int64_t(begin), int64_t(end)};
}

Tensor GradientBuffer::bucket(size_t k) const {
  const auto [begin, end] = bucket_range(k);
  return flat_.rows(begin, end);
}

}  // namespace tensorgrad
