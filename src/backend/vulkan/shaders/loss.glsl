// Included by the loss family's shaders (loss_*.comp), after common.glsl.
// Row-wise work goes to teams of T invocations (constant 2; T a power of two
// dividing the workgroup size, itself a power of two <= 256): one team per
// row, so that a row of 10 classes takes a few invocations and a row of 1000
// takes 128. Reductions run in shared memory as trees in a fixed order, so
// every run gives the same bits. Every invocation must call them (they hold
// barriers): inactive teams call them with empty rows.
layout(constant_id = 2) const uint T = 1;

const uint kMaxGroup = 256;
const uint kNone = 0xffffffffu;  // no index (an empty argmax)
shared float red_f[kMaxGroup];
shared uint red_u[kMaxGroup];

float nan_value() { return uintBitsToFloat(0x7fc00000u); }
float neg_inf() { return uintBitsToFloat(0xff800000u); }

uint lane() { return gl_LocalInvocationID.x % T; }
uint team() { return gl_LocalInvocationID.x / T; }
uint teams() { return gl_WorkGroupSize.x / T; }

// The value every lane of the team gets: lane 0's after the tree.
float team_result_f() {
  barrier();
  const float r = red_f[gl_LocalInvocationID.x - lane()];
  barrier();
  return r;
}

float team_sum(float v) {
  const uint i = gl_LocalInvocationID.x, l = lane();
  red_f[i] = v;
  for (uint s = T / 2; s > 0; s >>= 1) {
    barrier();
    if (l < s) red_f[i] += red_f[i + s];
  }
  return team_result_f();
}

float team_max(float v) {
  const uint i = gl_LocalInvocationID.x, l = lane();
  red_f[i] = v;
  for (uint s = T / 2; s > 0; s >>= 1) {
    barrier();
    if (l < s) red_f[i] = nan_max(red_f[i], red_f[i + s]);
  }
  return team_result_f();
}

uint team_sum_u(uint v) {
  const uint i = gl_LocalInvocationID.x, l = lane();
  red_u[i] = v;
  for (uint s = T / 2; s > 0; s >>= 1) {
    barrier();
    if (l < s) red_u[i] += red_u[i + s];
  }
  barrier();
  const uint r = red_u[i - l];
  barrier();
  return r;
}

// (value, index) candidates of an argmax: the larger value wins, equal values
// the lower index, so the tree finds the first maximum whatever the lanes' order.
void argmax_take(inout float bv, inout uint bi, float v, uint i) {
  if (i != kNone && (bi == kNone || v > bv || (v == bv && i < bi))) {
    bv = v;
    bi = i;
  }
}

// The CPU's argmax of row x[at, at + n) (kernels/softmax.cpp: best moves to
// j when x[j] > x[best]): the first maximum of the non-NaN values, and 0
// when x[at] is NaN (nothing compares greater than it). kNone when n == 0.
uint team_argmax(F32 x, uint at, uint n) {
  const uint i = gl_LocalInvocationID.x, l = lane();
  float bv = 0.0;
  uint bi = kNone;
  for (uint j = l; j < n; j += T) {
    const float v = x.v[at + j];
    if (!isnan(v)) argmax_take(bv, bi, v, j);
  }
  red_f[i] = bv;
  red_u[i] = bi;
  for (uint s = T / 2; s > 0; s >>= 1) {
    barrier();
    if (l < s) {
      float v = red_f[i];
      uint k = red_u[i];
      argmax_take(v, k, red_f[i + s], red_u[i + s]);
      red_f[i] = v;
      red_u[i] = k;
    }
  }
  barrier();
  const uint r = red_u[i - l];
  barrier();
  if (n > 0 && isnan(x.v[at])) return 0;
  return r;
}

// Sums over the whole workgroup (the scalar outputs), in a fixed order.
float group_sum(float v) {
  const uint i = gl_LocalInvocationID.x;
  red_f[i] = v;
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    barrier();
    if (i < s) red_f[i] += red_f[i + s];
  }
  barrier();
  const float r = red_f[0];
  barrier();
  return r;
}

uint group_sum_u(uint v) {
  const uint i = gl_LocalInvocationID.x;
  red_u[i] = v;
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    barrier();
    if (i < s) red_u[i] += red_u[i + s];
  }
  barrier();
  const uint r = red_u[0];
  barrier();
  return r;
}

// The rows this workgroup's teams take: row = first + team() for each
// `first` of the loop, the same for every invocation of the group (the
// barriers inside need it).
#define FOR_EACH_ROW_BLOCK(first, rows) \
  for (uint first = gl_WorkGroupID.x * teams(); first < (rows); first += gl_NumWorkGroups.x * teams())

// One row's maximum m and s = sum(exp(z - m)), as kernels/softmax.cpp's
// row_stats. `bad` marks the rows whose CPU results are all NaN there: a NaN
// logit (in m or in s), +inf (exp(inf - inf)) or every logit -inf; set
// explicitly, since a device need not carry NaN through max and exp.
struct RowStats {
  float m;
  float s;
  bool bad;
};

RowStats row_stats(F32 z, uint at, uint n) {
  const uint l = lane();
  float m = neg_inf();
  for (uint j = l; j < n; j += T) m = nan_max(m, z.v[at + j]);
  m = team_max(m);
  const bool bad = isnan(m) || isinf(m);
  float s = 0.0;
  if (!bad)
    for (uint j = l; j < n; j += T) s += exp(z.v[at + j] - m);
  s = team_sum(s);
  return RowStats(m, s, bad);
}
