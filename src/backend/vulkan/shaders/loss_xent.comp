#version 450
#include "common.glsl"
#include "loss.glsl"
// Softmax cross-entropy of logits z{B,C} against labels t: float32 {B,C}
// (one-hot or probabilities) or int32 {B} class ids (sparse != 0), with
// optional row weights w{B} (weighted != 0); kernels/softmax.cpp's formulas.
// Constant 1: 0 forward, one workgroup: out[0] = sum_i w_i CE_i / B, each
//   team summing its rows in order, then a tree over the teams;
// 1 backward, a grid: out = (softmax sum(t) - t) w_i g[0] / B.
// A class id outside [0, C) makes its row's loss (and gradient row) NaN,
// reads nothing out of bounds, and is reported in the status words (the
// host throws the CPU's IndexError after the submit).
layout(constant_id = 1) const uint OP = 0;
layout(push_constant) uniform Push {
  F32 z;
  F32 t;  // I32 where sparse
  F32 w;
  F32 g;
  F32 res;
  uint rows;
  uint cols;
  uint sparse;
  uint weighted;
  Status status;
} p;

void main() {
  const uint l = lane();
  I32 ids = I32(uint64_t(p.t));
  const float gs = OP == 1 ? p.g.v[0] / float(p.rows) : 0.0;
  float acc = 0.0;  // lane 0: sum of w_i CE_i over the team's rows, in row order
  FOR_EACH_ROW_BLOCK(first, p.rows) {
    const uint row = first + team();
    const bool live = row < p.rows;
    const uint n = live ? p.cols : 0, at = live ? row * p.cols : 0;
    const RowStats st = row_stats(p.z, at, n);
    const int id = p.sparse != 0 && live ? ids.v[row] : 0;
    const bool id_ok = p.sparse == 0 || (id >= 0 && uint(id) < p.cols);
    if (live && !id_ok && l == 0) report(p.status, kStatusClassId, id, row, p.cols);
    const float wi = p.weighted != 0 && live ? p.w.v[row] : 1.0;
    if (OP == 0) {
      const float log_s = st.bad ? nan_value() : log(st.s);
      float ce;
      if (p.sparse != 0) {
        ce = id_ok && live ? log_s - (p.z.v[at + uint(id)] - st.m) : nan_value();
      } else {
        // sum_j t_j (log_s - (z_j - m)) over t_j != 0, as the CPU: a zero target with a -inf logit adds nothing.
        float part = 0.0;
        for (uint j = l; j < n; j += T) {
          const float tj = p.t.v[at + j];
          if (tj != 0.0 || isnan(tj)) part += tj * (log_s - (p.z.v[at + j] - st.m));
        }
        ce = team_sum(part);
      }
      if (live && l == 0) acc += wi * ce;
    } else {
      float tsum = 1.0;
      if (p.sparse == 0) {
        float part = 0.0;
        for (uint j = l; j < n; j += T) part += p.t.v[at + j];
        tsum = team_sum(part);
      }
      const float sc = gs * wi, p_scale = tsum / st.s;
      for (uint j = l; j < n; j += T) {
        const float target = p.sparse != 0 ? (int(j) == id ? 1.0 : 0.0) : p.t.v[at + j];
        const float d = sc * (exp(p.z.v[at + j] - st.m) * p_scale - target);
        p.res.v[at + j] = st.bad || !id_ok ? nan_value() : d;
      }
    }
  }
  if (OP == 0) {
    const float total = group_sum(acc);
    if (gl_LocalInvocationID.x == 0) p.res.v[0] = p.rows > 0 ? total / float(p.rows) : 0.0;
  }
}
