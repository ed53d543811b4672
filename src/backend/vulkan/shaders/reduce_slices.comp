#version 450
#include "common.glsl"
// Every reduction of the family (kernels/reduction.cpp): output o (of n_out,
// row-major over x's kept axes) combines the `count` elements of x at
// kept_offset(o) + reduced_offset(k), k = 0 .. count - 1. The kept and the
// reduced axes come merged into at most 3 groups each (size, stride in x;
// group 0 outermost). LANES invocations share an output: lane l takes
// k = l, l + LANES, ... in order, then the lanes' partials meet in a tree of
// fixed shape in shared memory, so every run gives the same bits. No atomics.
layout(constant_id = 1) const uint OP = 0;             // 0 sum, 1 mean, 2 max, 3 max backward
layout(constant_id = 2) const uint LANES = 1;          // a power of two dividing the workgroup
layout(constant_id = 3) const bool LANES_FAST = false;  // an output's lanes adjacent (a contiguous reduction)

layout(push_constant) uniform Push {
  F32 x;
  F32 y;  // the outputs, or for max backward dx (x's shape)
  F32 g;  // max backward's gradient (n_out elements)
  uint n_out;
  uint count;
  uint kept_rank;
  uint red_rank;
  uint kept_size[3];
  uint kept_stride[3];
  uint red_size[3];
  uint red_stride[3];
  float empty;  // the mean of an empty slice
} p;

const uint WG = gl_WorkGroupSize.x;
const uint PER = WG / LANES;  // outputs per workgroup
const uint NONE = 0xffffffffu;

// The lanes' partials: sum and compensation, or maximum and its index.
shared float s_value[WG];
shared float s_comp[WG];
shared uint s_index[WG];

uint kept_offset(uint o) {
  uint off = 0;
  for (int d = int(p.kept_rank) - 1; d >= 0; --d) {
    off += (o % p.kept_size[d]) * p.kept_stride[d];
    o /= p.kept_size[d];
  }
  return off;
}

uint reduced_offset(uint k) {
  if (p.red_rank == 1) return k * p.red_stride[0];
  uint off = 0;
  for (int d = int(p.red_rank) - 1; d >= 0; --d) {
    off += (k % p.red_size[d]) * p.red_stride[d];
    k /= p.red_size[d];
  }
  return off;
}

// Whether (bm, bi) beats the running maximum (am, ai): the first maximum in
// index order wins, a NaN counting as maximal (kernels.h's first_max).
bool beats(float am, uint ai, float bm, uint bi) {
  if (bi == NONE) return false;
  if (ai == NONE) return true;
  if (isnan(am)) return isnan(bm) && bi < ai;
  if (isnan(bm)) return true;
  return bm > am || (bm == am && bi < ai);
}

// s + v exactly as the float pair (s, c) (Neumaier's compensated sum): the
// CPU sums Sum and Mean in double, and this keeps the float sum as close.
// `precise` stops drivers from folding (s - t) + v to 0.
void add(inout float s, inout float c, float v) {
  precise float t = s + v;
  precise float e = abs(s) >= abs(v) ? (s - t) + v : (v - t) + s;
  precise float cc = c + e;
  c = cc;
  s = t;
}

// An infinite or NaN s has a NaN compensation (inf - inf) that must not
// reach the result.
float total(float s, float c) { return isnan(s) || isinf(s) ? s : s + c; }

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint lane = LANES_FAST ? lid % LANES : lid / PER;
  const uint col = LANES_FAST ? lid / LANES : lid % PER;
  const uint slot = col * LANES + lane;
  // The loop bound is the same for the whole workgroup, so its barriers are uniform.
  for (uint base = gl_WorkGroupID.x * PER; base < p.n_out; base += gl_NumWorkGroups.x * PER) {
    const uint o = base + col;
    const bool live = o < p.n_out;
    const uint ko = live ? kept_offset(o) : 0;
    float s = 0.0, c = 0.0;
    uint best = NONE;
    if (live)
      for (uint k = lane; k < p.count; k += LANES) {
        const float v = p.x.v[ko + reduced_offset(k)];
        if (OP <= 1) {
          add(s, c, v);
        } else if (beats(s, best, v, k)) {
          s = v;
          best = k;
        }
      }
    if (LANES > 1) {
      s_value[slot] = s;
      s_comp[slot] = c;
      s_index[slot] = best;
      for (uint h = LANES / 2; h > 0; h /= 2) {
        barrier();
        if (lane < h) {
          const uint other = slot + h;
          if (OP <= 1) {
            float a = s_value[slot], ac = s_comp[slot];
            add(a, ac, s_value[other]);
            s_value[slot] = a;
            s_comp[slot] = ac + s_comp[other];
          } else if (beats(s_value[slot], s_index[slot], s_value[other], s_index[other])) {
            s_value[slot] = s_value[other];
            s_index[slot] = s_index[other];
          }
        }
      }
      barrier();
      s = s_value[col * LANES];
      c = s_comp[col * LANES];
      best = s_index[col * LANES];
      barrier();  // before the next outputs overwrite the partials
    }
    if (!live) continue;
    if (OP == 3) {
      const float gv = p.g.v[o];
      for (uint k = lane; k < p.count; k += LANES) p.y.v[ko + reduced_offset(k)] = k == best ? gv : 0.0;
    } else if (lane == 0) {
      float r;
      if (OP == 0) r = total(s, c);
      else if (OP == 1) r = p.count == 0 ? p.empty : total(s, c) / float(p.count);
      else r = best == NONE ? p.empty : s;
      p.y.v[o] = r;
    }
  }
}
