// Included by every shader: the extensions and the tensor reference types.
// Tensors are reached through buffer device addresses held in push
// constants (8 bytes each, first in the push block), so no descriptor set
// is bound. No shader assumes a subgroup size; workgroup sizes come from
// specialization constant 0.
#extension GL_EXT_buffer_reference : require
// The CPU's NaN, infinity and signed-zero semantics in every shader: without
// SPIR-V's SignedZeroInfNanPreserve execution mode, Vulkan lets a driver
// assume that none occur (the context refuses a device whose
// shaderSignedZeroInfNanPreserveFloat32 is false).
#extension GL_EXT_spirv_intrinsics : require
spirv_execution_mode(capabilities = [4466], 4461, 32);  // SignedZeroInfNanPreserve for float32
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32 { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer I64 { int64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer F64 { double v[]; };

// What a kernel reports of bad input it cannot throw for (recorder.h's
// KernelStatus): the first invocation to set `flag` writes the rest. Kernels
// that change state return at once when `flag` is set (skip_update).
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Status {
  uint flag;
  uint code;  // KernelStatus::kGatherId, kClassId
  int id;
  uint position;
  uint bound;
};
const uint kStatusGatherId = 1u;
const uint kStatusClassId = 2u;

void report(Status s, uint code, int id, uint position, uint bound) {
  if (atomicCompSwap(s.flag, 0u, 1u) == 0u) {
    s.code = code;
    s.id = id;
    s.position = position;
    s.bound = bound;
  }
}
// Whether a kernel of this submission reported bad input: then an update
// kernel leaves its state as it was.
bool skip_update(Status s) { return s.flag != 0u; }

layout(local_size_x_id = 0) in;

// The grid-stride loop over n items: every invocation of every workgroup.
#define FOR_EACH(i, n) for (uint i = gl_GlobalInvocationID.x; i < (n); i += gl_NumWorkGroups.x * gl_WorkGroupSize.x)

// NaN-propagating max and min (GLSL's max/min do not promise it).
float nan_max(float a, float b) { return isnan(a) || isnan(b) ? a + b : max(a, b); }
float nan_min(float a, float b) { return isnan(a) || isnan(b) ? a + b : min(a, b); }
