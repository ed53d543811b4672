// Shared by the recurrent shaders (lstm_step.comp, lstm_backward_step.comp,
// gru_step.comp, gru_backward_step.comp): the gates' activations as the CPU
// kernels compute them (kernels/recurrent.cpp: 1 / (1 + e^-x) and tanh), with
// elementwise.glsl's float32 exp and tanh, within a few ulp of the CPU's libm
// or SLEEF where the built-ins are only promised to 3 ulp plus 2 |x| ulp.
#include "elementwise.glsl"

float sigmoid_f(float x) { return 1.0 / (1.0 + exp_f(-x)); }  // 0 where e^-x overflows, NaN for NaN

// Each invocation takes a block of RB rows by UB units of a step (their sums
// share loads: RB + UB per RB x UB fmas, which CPU implementations need, as
// they run every load as a loop over the SIMD lanes), rows along the grid's
// y and units along x; grid-stride in both for grids at the device's limits.
// Every sum runs in the same order whatever the blocks, so they change the
// speed only. Row and unit indices clamp at the last row and unit (a partial
// block computes copies it does not store).
layout(constant_id = 1) const uint RB = 1;
layout(constant_id = 2) const uint UB = 1;
#define FOR_EACH_BLOCK(b0, j0, B, H)                                                   \
  for (uint b0 = gl_WorkGroupID.y * RB; b0 < (B); b0 += gl_NumWorkGroups.y * RB) \
    for (uint j0 = gl_GlobalInvocationID.x * UB; j0 < (H); j0 += gl_NumWorkGroups.x * gl_WorkGroupSize.x * UB)
