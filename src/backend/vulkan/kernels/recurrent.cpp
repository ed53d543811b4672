// Vulkan kernels: the recurrent family (kernels.h), LstmSequence,
// GruSequence and their backward ops, each computing what the CPU's
// kernels/recurrent.cpp computes. Time is sequential, so each op records one
// dispatch per step (lstm_step.comp, lstm_backward_step.comp, gru_step.comp,
// gru_backward_step.comp, the step a push constant) with one invocation per
// (row, unit); the recorder's barrier between dispatches makes step t - 1's
// output (or, backward, step t + 1's) visible to step t. The backward ops
// carry their per-unit state (the cell gradient, dh z) from step to step in
// a slot of the output that the next step's invocation for the same unit
// overwrites, so no scratch memory is needed. With initial states, the
// backward ops record one more dispatch for the output's extra step T.
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 64;

// The push block of every recurrent shader: five tensors, the sizes and the
// step. An absent initial state gets another tensor's address, never read, so
// that no shader holds a null reference a compiler might load speculatively.
struct StepPush {
  uint64_t a, b, c, d, e;
  uint32_t batch, steps, units, t, has_state;
};

// Records `shader` for t = 0 .. T-1, or backward T-1 .. 0 and then T where
// there is an initial state's gradient to finish.
void record_steps(Recorder& r, const char* shader, StepPush push, bool backward) {
  const uint32_t groups = r.groups(uint64_t(push.batch) * push.units, kGroup);
  if (push.batch == 0 || push.units == 0) return;
  for (uint32_t s = 0; s < push.steps; ++s) {
    push.t = backward ? push.steps - 1 - s : s;
    r.dispatch(shader, {kGroup}, push, groups);
  }
  if (backward && push.has_state) {
    push.t = push.steps;
    r.dispatch(shader, {kGroup}, push, groups);
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
