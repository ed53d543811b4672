#version 450
// SquaredNorm and ClipNorm in double (stateful.glsl); stateful_norm_f32 where the device has no float64.
#define STATEFUL_FP64
#define STATEFUL_NORM
#include "common.glsl"
#include "stateful.glsl"
