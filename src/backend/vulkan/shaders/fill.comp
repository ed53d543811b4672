#version 450
#include "common.glsl"
// y[i] = value
layout(push_constant) uniform Push { F32 y; uint n; float value; } p;
void main() { FOR_EACH(i, p.n) p.y.v[i] = p.value; }
