#version 450
#include "common.glsl"
#include "loss.glsl"
// Counts over rows of scores z{B,C} with labels t: int32 {B} class ids
// (sparse != 0) or float32 {B,C}, whose label is the row's argmax; one
// workgroup, each team counting its rows, then a tree over the teams.
// Constant 1: 0 accuracy (argmax(z_i) == label_i);
// 1 top_k_accuracy: fewer than k scores strictly above the label's, a label
//   outside [0, C) or a non-finite label score a miss (kernels/losses.cpp).
layout(constant_id = 1) const uint OP = 0;
layout(push_constant) uniform Push {
  F32 z;
  F32 t;  // I32 where sparse
  F32 res;
  uint rows;
  uint cols;
  uint sparse;
  uint k;
} p;

void main() {
  const uint l = lane();
  I32 ids = I32(uint64_t(p.t));
  uint count = 0;
  FOR_EACH_ROW_BLOCK(first, p.rows) {
    const uint row = first + team();
    const bool live = row < p.rows;
    const uint n = live ? p.cols : 0, at = live ? row * p.cols : 0;
    int label = 0;
    if (p.sparse != 0) {
      label = live ? ids.v[row] : -1;
    } else {
      const uint a = team_argmax(p.t, at, n);
      label = a == kNone ? -1 : int(a);
    }
    const bool label_ok = label >= 0 && uint(label) < n;
    if (OP == 0) {
      const uint a = team_argmax(p.z, at, n);
      if (live && l == 0 && label_ok && a == uint(label)) ++count;
    } else {
      const float sl = label_ok ? p.z.v[at + uint(label)] : 0.0;
      uint greater = 0;
      for (uint j = l; j < n; j += T) greater += p.z.v[at + j] > sl ? 1 : 0;
      greater = team_sum_u(greater);
      if (live && l == 0 && label_ok && !isnan(sl) && !isinf(sl) && greater < p.k) ++count;
    }
  }
  const uint total = group_sum_u(count);
  if (gl_LocalInvocationID.x == 0) p.res.v[0] = float(total);
}
