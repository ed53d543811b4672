#version 450
#include "common.glsl"
#include "batch_norm.glsl"
// The per-channel sums of the family over the rows of x {rows, C}: OP 0
// BatchNormStats (y = [mean; biased variance]), OP 1 BatchNormParamGrad
// (y = [sum(g xhat); sum(g)]). A workgroup takes COLS adjacent channels (a
// row's COLS floats read together) with LANES = WG / COLS invocations each:
// lane l sums rows l, l + LANES, ... in order, then the lanes' float pairs
// meet in a tree of fixed shape in shared memory, so every run gives the
// same bits. No atomics, no scratch memory.
layout(constant_id = 1) const uint OP = 0;
layout(constant_id = 2) const uint COLS = 1;  // a power of two dividing the workgroup

layout(push_constant) uniform Push {
  F32 x;
  F32 stats;  // param grad: [mean; var]
  F32 g;      // param grad: the output's gradient
  F32 gamma;  // param grad with relu: the forward's map, for the mask
  F32 beta;
  F32 y;  // {2, C}
  uint rows;
  uint C;
  uint relu;
  float eps;
} p;

const uint WG = gl_WorkGroupSize.x;
const uint LANES = WG / COLS;

// Two float pairs per invocation, at slot lane * COLS + col (its local id).
shared float s_a[WG];
shared float s_ac[WG];
shared float s_b[WG];
shared float s_bc[WG];

// Sums lane 0's pairs and every other lane's into lane 0's slots (col's).
void tree(uint lane, uint col) {
  for (uint h = LANES / 2; h > 0; h /= 2) {
    barrier();
    if (lane < h) {
      const uint s = lane * COLS + col, o = s + h * COLS;
      float v = s_a[s], vc = s_ac[s];
      add_pair(v, vc, s_a[o], s_ac[o]);
      s_a[s] = v;
      s_ac[s] = vc;
      v = s_b[s];
      vc = s_bc[s];
      add_pair(v, vc, s_b[o], s_bc[o]);
      s_b[s] = v;
      s_bc[s] = vc;
    }
  }
  barrier();
}

void put(uint slot, float a, float ac, float b, float bc) {
  s_a[slot] = a;
  s_ac[slot] = ac;
  s_b[slot] = b;
  s_bc[slot] = bc;
}

// The mean in one pass, then the deviations' sums in a second: var =
// (sum d^2 - (sum d)^2 / n) / n with d = x - mean, which has no float
// cancellation (the CPU's E[x^2] - mean^2 is in double; its float form
// would lose |mean| / std digits), the small sum d correcting the mean's
// rounding.
void stats(uint c, bool live, uint lane, uint col) {
  const uint slot = lane * COLS + col;
  float s = 0.0, sc = 0.0;
  if (live)
    for (uint r = lane; r < p.rows; r += LANES) add(s, sc, p.x.v[r * p.C + c]);
  put(slot, s, sc, 0.0, 0.0);
  tree(lane, col);
  const float n = float(p.rows);
  const float mean = p.rows == 0 ? 0.0 : total(s_a[col], s_ac[col]) / n;
  barrier();  // every lane has read the mean before the slots are reused
  float d1 = 0.0, d1c = 0.0, d2 = 0.0, d2c = 0.0;
  if (live)
    for (uint r = lane; r < p.rows; r += LANES) {
      const float d = p.x.v[r * p.C + c] - mean;
      add(d1, d1c, d);
      add(d2, d2c, d * d);
    }
  put(slot, d1, d1c, d2, d2c);
  tree(lane, col);
  if (live && lane == 0) {
    const float s1 = total(s_a[col], s_ac[col]), s2 = total(s_b[col], s_bc[col]);
    float var = p.rows == 0 ? 0.0 : (s2 - s1 * (s1 / n)) / n;
    if (var < 0.0) var = 0.0;  // NaN kept, as the CPU's std::max(var, 0.0)
    p.y.v[c] = mean;
    p.y.v[p.C + c] = var;
  }
}

// sum(g (x - mean)) from exact products (the CPU's in double) and sum(g);
// with relu, g counts only where the forward's x a + b > 0.
void param_grad(uint c, bool live, uint lane, uint col) {
  float s = 0.0, sc = 0.0, t = 0.0, tc = 0.0;
  float inv = 0.0;
  if (live) {
    const float mean = p.stats.v[c];
    inv = inverse_std(p.stats, p.C, c, p.eps);
    float a = 0.0, b = 0.0;
    if (p.relu != 0) coefficients(p.stats, p.gamma, p.beta, p.C, c, p.eps, a, b);
    for (uint r = lane; r < p.rows; r += LANES) {
      const float x = p.x.v[r * p.C + c];
      float gv = p.g.v[r * p.C + c];
      if (p.relu != 0) gv = relu_pass(affine(x, a, b), gv);
      float pr, e;
      two_product(gv, x - mean, pr, e);
      add(s, sc, pr);
      precise float se = sc + e;
      sc = se;
      add(t, tc, gv);
    }
  }
  put(lane * COLS + col, s, sc, t, tc);
  tree(lane, col);
  if (live && lane == 0) {
    p.y.v[c] = total(s_a[col], s_ac[col]) * inv;
    p.y.v[p.C + c] = total(s_b[col], s_bc[col]);
  }
}

void main() {
  const uint col = gl_LocalInvocationID.x % COLS, lane = gl_LocalInvocationID.x / COLS;
  // The loop bound is the same for the whole workgroup, so its barriers are uniform.
  for (uint base = gl_WorkGroupID.x * COLS; base < p.C; base += gl_NumWorkGroups.x * COLS) {
    const uint c = base + col;
    const bool live = c < p.C;
    if (OP == 0) stats(c, live, lane, col);
    else param_grad(c, live, lane, col);
    barrier();  // lane 0 has read the sums before the next channels' lanes overwrite them
  }
}
