#version 450
#include "common.glsl"
// The float-pair form (no shaderFloat64 needed).
#include "optimizer.glsl"
