// Helpers of the stateful family's shaders (kernels/stateful.cpp).

// core/random.h's hash_random and hash_uniform, bit for bit: dropout masks
// must equal the CPU's, so that a model trains the same on either backend.
uint64_t hash_random(uint64_t key, uint64_t counter) {
  uint64_t z = key + 0x9E3779B97F4A7C15ul * (counter + 1ul);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ul;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBul;
  return z ^ (z >> 31);
}
float hash_uniform(uint64_t key, uint64_t counter) {
  return float(uint(hash_random(key, counter) >> 40)) * (1.0 / 16777216.0);
}

// 2^k as a float, exactly (exp2 promises only a few ulps); k in [-126, 127].
float pow2(int k) { return intBitsToFloat((127 + k) << 23); }

// Error-free transformations for the float-pair sums (Knuth's TwoSum,
// Dekker's product with Veltkamp's split). `precise` keeps the compiler
// from contracting or reassociating what the error terms depend on.
void two_sum(float a, float b, out float s, out float e) {
  precise float ss = a + b;
  precise float bb = ss - a;
  precise float ee = (a - (ss - bb)) + (b - bb);
  s = ss;
  e = ee;
}
// a * a = p + e exactly, for |a| <= 1 (no overflow in the split).
void two_square(float a, out float p, out float e) {
  precise float c = 4097.0 * a;
  precise float ah = c - (c - a);
  precise float al = a - ah;
  precise float pp = a * a;
  precise float ee = ((ah * ah - pp) + 2.0 * ah * al) + al * al;
  p = pp;
  e = ee;
}
// (h1 + l1) + (h2 + l2) as a normalised pair.
void pair_add(float h1, float l1, float h2, float l2, out float h, out float l) {
  float s, e;
  two_sum(h1, h2, s, e);
  precise float el = e + (l1 + l2);
  precise float hh = s + el;
  precise float ll = el - (hh - s);
  h = hh;
  l = ll;
}

// x 2^k for |k| up to 252 (beyond, the result is 0 or inf for any normal x),
// in two exact steps so that no factor leaves the normal range.
float scale2(float x, int k) {
  k = clamp(k, -252, 252);
  const int h = k / 2;
  return x * pow2(h) * pow2(k - h);
}

#ifdef STATEFUL_NORM
// SquaredNorm and ClipNorm (constant 1: 0 and 1), with the norm pair of
// ops/norm_pair.h: (s, e) holds s 4^e, s in [0.5, 2) (0, inf or NaN with e =
// 0). STATEFUL_FP64 builds the double form (the CPU's arithmetic); without
// it, the float-pair form for devices without shaderFloat64. Two shader
// files rather than one constant: a module that declares Float64 may not be
// made on such a device, whichever branch its constants take.
layout(constant_id = 1) const uint OP = 0;
// squared_norm: a = x, b = running pair (flag 1), c = out {2};
// clip_norm: a = grad, b = pair, flags 2 = kClipNormEps, 4 = kNonFiniteNormToNaN.
layout(push_constant) uniform Push { F32 a; F32 b; F32 c; uint n; uint flags; float clip; } p;

const uint kHasRunning = 1u, kEps = 2u, kNonFiniteToNaN = 4u;

#ifdef STATEFUL_FP64
shared double part[gl_WorkGroupSize.x];

// One workgroup: strided partial sums in double (float squares are exact in
// double and no sum of them overflows), then a tree in shared memory: a
// fixed order, so the same bits every run.
void squared_norm() {
  const uint t = gl_LocalInvocationID.x;
  double acc = 0.0;
  for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) {
    const double v = double(p.a.v[i]);
    acc += v * v;
  }
  part[t] = acc;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    barrier();
  }
  if (t != 0) return;
  double total = part[0];
  if ((p.flags & kHasRunning) != 0) total += ldexp(double(p.b.v[0]), 2 * int(p.b.v[1]));
  if (!(total > 0.0) || isinf(total)) {
    p.c.v[0] = float(total);
    p.c.v[1] = 0.0;
    return;
  }
  int e2;
  frexp(total, e2);
  const int e = e2 >> 1;  // floor(e2 / 2)
  p.c.v[0] = float(ldexp(total, -2 * e));
  p.c.v[1] = float(e);
}

// The coefficient as the CPU's clip_norm computes it, in double.
float clip_coefficient(out bool unchanged) {
  const double c = double(p.clip), norm = ldexp(sqrt(double(p.b.v[0])), int(p.b.v[1]));
  unchanged = false;
  if ((p.flags & kNonFiniteToNaN) != 0 && (isnan(norm) || isinf(norm))) return uintBitsToFloat(0x7FC00000u);
  double coef;
  if ((p.flags & kEps) != 0) {
    coef = c / (norm + 1e-6lf);
    coef = coef > 1.0lf ? 1.0lf : coef;  // NaN stays NaN
  } else {
    coef = c / (norm <= c ? c : norm);
  }
  unchanged = coef == 1.0lf;
  return float(coef);
}

#else  // the float-pair form
shared float part_hi[gl_WorkGroupSize.x];
shared float part_lo[gl_WorkGroupSize.x];

// One workgroup, two passes over x: the largest |x| (NaN wins), then the
// squares of x 2^-k (k its exponent, so they lie in [0, 1) and neither
// overflow nor underflow where it matters), summed as hi + lo float pairs
// (about 44 bits, as the CPU's double to within its float result), the
// partial sums combined by a tree in a fixed order. The pair then carries
// 4^k, as the CPU's carries its double's exponent.
void squared_norm() {
  const uint t = gl_LocalInvocationID.x;
  float m = 0.0;
  for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) m = nan_max(m, abs(p.a.v[i]));
  part_hi[t] = m;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (t < s) part_hi[t] = nan_max(part_hi[t], part_hi[t + s]);
    barrier();
  }
  const float big = part_hi[0];
  barrier();  // everyone has read part_hi[0] before it is overwritten
  const bool finite = !(isnan(big) || isinf(big));
  float hi = 0.0, lo = 0.0;
  int k = 0;
  if (finite && big > 0.0) {
    frexp(big, k);  // big = f 2^k, f in [0.5, 1)
    const int k1 = k / 2;
    const float s1 = pow2(-k1), s2 = pow2(k1 - k);
    for (uint i = t; i < p.n; i += gl_WorkGroupSize.x) {
      float sq, err;
      two_square(p.a.v[i] * s1 * s2, sq, err);
      pair_add(hi, lo, sq, err, hi, lo);
    }
  }
  part_hi[t] = hi;
  part_lo[t] = lo;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (t < s) {
      float h, l;
      pair_add(part_hi[t], part_lo[t], part_hi[t + s], part_lo[t + s], h, l);
      part_hi[t] = h;
      part_lo[t] = l;
    }
    barrier();
  }
  if (t != 0) return;
  const bool running = (p.flags & kHasRunning) != 0;
  const float rs = running ? p.b.v[0] : 0.0;
  const int re = running ? int(p.b.v[1]) : 0;
  if (!finite || isnan(rs) || isinf(rs)) {  // NaN or inf, as the CPU's double sum gives
    p.c.v[0] = finite ? rs : big + rs;
    p.c.v[1] = 0.0;
    return;
  }
  hi = part_hi[0];
  lo = part_lo[0];
  if (rs > 0.0) {
    // Bring both to the larger exponent; the smaller is dropped where it is
    // below 2^-100 of the larger (far under the float result's precision).
    if (hi == 0.0) {
      hi = rs;
      k = re;
    } else if (re > k) {
      const int d = 2 * (k - re);
      hi = d < -100 ? 0.0 : hi * pow2(d);
      lo = d < -100 ? 0.0 : lo * pow2(d);
      k = re;
      pair_add(hi, lo, rs, 0.0, hi, lo);
    } else {
      const int d = 2 * (re - k);
      if (d >= -100) pair_add(hi, lo, rs * pow2(d), 0.0, hi, lo);
    }
  }
  const float total = hi + lo;
  if (!(total > 0.0)) {
    p.c.v[0] = total;
    p.c.v[1] = 0.0;
    return;
  }
  int f;
  frexp(total, f);
  const int q = f >> 1;  // floor(f / 2)
  p.c.v[0] = total * pow2(-2 * q);
  p.c.v[1] = float(k + q);
}

// The coefficient in float: sqrt(s) in float and the scale 2^e applied
// exactly, so that norms past float's range still give the right (tiny)
// coefficient; within a few float ulps of the CPU's double.
float clip_coefficient(out bool unchanged) {
  const float s = p.b.v[0], c = p.clip;
  const int e = int(p.b.v[1]);
  unchanged = false;
  if ((p.flags & kNonFiniteToNaN) != 0 && (isnan(s) || isinf(s))) return uintBitsToFloat(0x7FC00000u);
  const float r = sqrt(s), norm = scale2(r, e);  // norm saturates to inf or 0 past float's range
  // c / norm as (c / 2) / r 2^(1 - e): exact scaling, and c / 2 / r cannot overflow.
  const float ratio = scale2((0.5 * c) / r, 1 - e);
  float coef;
  if ((p.flags & kEps) != 0) {
    coef = e > 100 ? ratio : c / (norm + 1e-6);  // past 2^100, + 1e-6 changes nothing
    coef = coef > 1.0 ? 1.0 : coef;              // NaN stays NaN
  } else {
    coef = norm <= c ? c / c : ratio;
  }
  unchanged = coef == 1.0;
  return coef;
}
#endif

void main() {
  if (OP == 0) {
    squared_norm();
  } else {
    bool unchanged;
    const float f = clip_coefficient(unchanged);
    if (unchanged) return;  // as the CPU, which leaves the gradient alone
    FOR_EACH(i, p.n) p.a.v[i] *= f;
  }
}
#endif
