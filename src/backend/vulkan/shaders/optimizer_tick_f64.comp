#version 450
#include "common.glsl"
// The double form, for devices with shaderFloat64.
#define TICK_FP64
#include "optimizer.glsl"
