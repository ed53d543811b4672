// Shared by the recurrent shaders (lstm_step.comp, lstm_backward_step.comp,
// gru_step.comp, gru_backward_step.comp): the gates' activations as the CPU
// kernels compute them (kernels/recurrent.cpp: 1 / (1 + e^-x) and tanh), with
// elementwise.glsl's float32 exp and tanh, within a few ulp of the CPU's libm
// or SLEEF where the built-ins are only promised to 3 ulp plus 2 |x| ulp.
#include "elementwise.glsl"

float sigmoid_f(float x) { return 1.0 / (1.0 + exp_f(-x)); }  // 0 where e^-x overflows, NaN for NaN
