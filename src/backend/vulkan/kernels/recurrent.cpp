// Vulkan kernels: the recurrent family (kernels.h), LstmSequence,
// GruSequence and their backward ops, each computing what the CPU's
// kernels/recurrent.cpp computes. Time is sequential, so each op records one
// dispatch per step (lstm_step.comp, lstm_backward_step.comp, gru_step.comp,
// gru_backward_step.comp, the step a push constant) with one invocation per
// (row, unit) or per block of them; the recorder's barrier between
// dispatches makes step t - 1's output (or, backward, step t + 1's) visible
// to step t. The backward ops
// carry their per-unit state (the cell gradient, dh z) from step to step in
// a slot of the output that the next step's invocation for the same unit
// overwrites, so no scratch memory is needed. With initial states, the
// backward ops record one more dispatch for the output's extra step T.
#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>

#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

// The push block of every recurrent shader: five tensors, the sizes and the
// step. An absent initial state gets another tensor's address, never read, so
// that no shader holds a null reference a compiler might load speculatively.
struct StepPush {
  uint64_t a, b, c, d, e;
  uint32_t batch, steps, units, t, has_state;
};

// Records `shader` for t = 0 .. T-1, or backward T-1 .. 0 and then T where
// there is an initial state's gradient to finish. Each invocation takes a
// block of rows by units (the shaders' RB and UB, recurrent.glsl): one by
// one on GPUs, for the most invocations; on CPU implementations, which run
// every load as a loop over the SIMD lanes, up to 8 rows by 4 units, so
// that each load feeds several fmas (the {32, 50, 64} LSTM and its backward
// op: 97 against 422 ms of CPU time on lavapipe). The workgroups are up to
// 64 invocations along the units (fewer for a narrow layer), the rows along
// the grid's y.
void record_steps(Recorder& r, const char* shader, StepPush push, bool backward) {
  // No steps: nothing to compute (the CPU kernel leaves a backward op's step T
  // of initial-state gradients unset then too).
  if (push.batch == 0 || push.units == 0 || push.steps == 0) return;
  // TENSORGRAD_VULKAN_RECURRENT_BLOCKS=gpu|cpu picks the other kind of
  // device's blocks, so that one device's tests cover both.
  const char* force = std::getenv("TENSORGRAD_VULKAN_RECURRENT_BLOCKS");
  const bool cpu = force && *force ? std::strcmp(force, "cpu") == 0
                                   : r.context().info().type == DeviceType::kCpuImplementation;
  const uint32_t rb = cpu ? std::bit_ceil(std::min(push.batch, 8u)) : 1;
  const uint32_t ub = cpu ? std::bit_ceil(std::min(push.units, 4u)) : 1;
  const uint32_t per_row = (push.units + ub - 1) / ub;  // invocations along the units
  const uint32_t group = std::bit_ceil(std::min(per_row, 64u));
  const uint32_t gx = r.groups(per_row, group);
  const uint32_t gy = std::min((push.batch + rb - 1) / rb, r.caps().max_group_count[1]);
  for (uint32_t s = 0; s < push.steps; ++s) {
    push.t = backward ? push.steps - 1 - s : s;
    r.dispatch(shader, {group, rb, ub}, push, gx, gy);
  }
  if (backward && push.has_state) {
    push.t = push.steps;
    r.dispatch(shader, {group, rb, ub}, push, gx, gy);
  }
}

// (xw{B,T,4H}, U{H,4H} [, h0, c0]) -> y{B,T,6H}.
void lstm_sequence(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const bool states = in.size() == 4;
  count32(in[0].numel(), "lstm_sequence");
  count32(out.numel(), "lstm_sequence");
  StepPush push{address(in[0]),
                address(in[1]),
                address(out),
                states ? address(in[2]) : address(in[0]),
                states ? address(in[3]) : address(in[0]),
                uint32_t(out.shape[0]),
                uint32_t(out.shape[1]),
                uint32_t(in[1].shape[0]),
                0,
                states ? 1u : 0u};
  record_steps(r, "lstm_step", push, false);
}

// (y{B,T,6H}, U{H,4H}, g{B,T,6H} [, c0{B,H}]) -> dz{B,T(+1),4H}.
void lstm_sequence_backward(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const bool states = in.size() == 4;
  count32(in[0].numel(), "lstm_sequence_backward");
  count32(out.numel(), "lstm_sequence_backward");
  StepPush push{address(in[0]),
                address(in[1]),
                address(in[2]),
                states ? address(in[3]) : address(in[0]),
                address(out),
                uint32_t(in[0].shape[0]),
                uint32_t(in[0].shape[1]),
                uint32_t(in[1].shape[0]),
                0,
                states ? 1u : 0u};
  record_steps(r, "lstm_backward_step", push, true);
}

// (xw{B,T,3H}, U{H,3H}, rb{3H} [, h0]) -> y{B,T,5H}.
void gru_sequence(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const bool state = in.size() == 4;
  count32(in[0].numel(), "gru_sequence");
  count32(out.numel(), "gru_sequence");
  StepPush push{address(in[0]),
                address(in[1]),
                address(in[2]),
                state ? address(in[3]) : address(in[0]),
                address(out),
                uint32_t(out.shape[0]),
                uint32_t(out.shape[1]),
                uint32_t(in[1].shape[0]),
                0,
                state ? 1u : 0u};
  record_steps(r, "gru_step", push, false);
}

// (y{B,T,5H}, U{H,3H}, g{B,T,5H} [, h0{B,H}]) -> d{B,T(+1),4H}.
void gru_sequence_backward(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const bool state = in.size() == 4;
  count32(in[0].numel(), "gru_sequence_backward");
  count32(out.numel(), "gru_sequence_backward");
  StepPush push{address(in[0]),
                address(in[1]),
                address(in[2]),
                state ? address(in[3]) : address(in[0]),
                address(out),
                uint32_t(in[0].shape[0]),
                uint32_t(in[0].shape[1]),
                uint32_t(in[1].shape[0]),
                0,
                state ? 1u : 0u};
  record_steps(r, "gru_backward_step", push, true);
}

}  // namespace

void add_recurrent_kernels(KernelTable& t) {
  t[size_t(OpKind::LstmSequence)] = lstm_sequence;
  t[size_t(OpKind::GruSequence)] = gru_sequence;
  t[size_t(OpKind::LstmSequenceBackward)] = lstm_sequence_backward;
  t[size_t(OpKind::GruSequenceBackward)] = gru_sequence_backward;
}

}  // namespace tensorgrad::vulkan
