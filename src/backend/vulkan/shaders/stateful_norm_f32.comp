#version 450
// SquaredNorm and ClipNorm in float pairs (stateful.glsl), for devices without shaderFloat64.
#define STATEFUL_NORM
#include "common.glsl"
#include "stateful.glsl"
