#version 450
#include "common.glsl"
// counter += 1 (AdvanceCounter), one invocation.
layout(push_constant) uniform Push { I64 counter; Status status; } p;
void main() {
  if (gl_GlobalInvocationID.x == 0 && !skip_update(p.status)) p.counter.v[0] += 1l;
}
