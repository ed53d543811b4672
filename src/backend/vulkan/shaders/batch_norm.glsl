// Shared by the batch_norm shaders (kernels/batch_norm.cpp): the CPU's
// per-channel affine map and ReLU rules (kernels/batch_norm.cpp,
// kernels/kernels.h), and float sums kept as close as the CPU's doubles.

// s + v exactly as the float pair (s, c) (Neumaier's compensated sum): the
// CPU sums in double. `precise` stops drivers from folding (s - t) + v to 0.
void add(inout float s, inout float c, float v) {
  precise float t = s + v;
  precise float e = abs(s) >= abs(v) ? (s - t) + v : (v - t) + s;
  precise float cc = c + e;
  c = cc;
  s = t;
}

// (s, c) + (t, tc): two lanes' pairs meeting in a reduction tree.
void add_pair(inout float s, inout float c, float t, float tc) {
  add(s, c, t);
  precise float cc = c + tc;
  c = cc;
}

// An infinite or NaN s has a NaN compensation (inf - inf) that must not
// reach the result.
float total(float s, float c) { return isnan(s) || isinf(s) ? s : s + c; }

// a b = p + e exactly (Dekker's product with Veltkamp's split; Vulkan's fma
// may round twice), as the CPU's product of two floats in double. e is 0
// where p is not finite or a factor too large to split (|a| > 2^115), where
// the pair cannot hold the error.
void two_product(float a, float b, out float p, out float e) {
  precise float pp = a * b;
  p = pp;
  precise float ca = 4097.0 * a, cb = 4097.0 * b;
  precise float ah = ca - (ca - a), bh = cb - (cb - b);
  precise float al = a - ah, bl = b - bh;
  precise float ee = ((ah * bh - pp) + ah * bl + al * bh) + al * bl;
  e = isnan(ee) || isinf(ee) || isnan(pp) || isinf(pp) ? 0.0 : ee;
}

// 1 / sqrt(var + eps) of channel c from stats {2, C} = [mean; var].
float inverse_std(F32 stats, uint C, uint c, float eps) { return 1.0 / sqrt(stats.v[C + c] + eps); }

// The forward's affine map x a + b: a = gamma inv, b = beta - mean a (the
// CPU's affine_coefficients). One function for the forward and for the
// ReLU masks of the backward ops, and `precise`, so that a mask recomputes
// the forward's value on this device bit for bit.
void coefficients(F32 stats, F32 gamma, F32 beta, uint C, uint c, float eps, out float a, out float b) {
  precise float aa = gamma.v[c] * inverse_std(stats, C, c, eps);
  precise float bb = beta.v[c] - stats.v[c] * aa;
  a = aa;
  b = bb;
}
float affine(float x, float a, float b) {
  precise float y = x * a + b;
  return y;
}

// max(v, 0) with NaN kept, -0 to +0 (kernels.h's relu_value).
float relu_value(float v) { return v <= 0.0 ? 0.0 : v; }
// g where the ReLU's input y > 0 or is NaN, else 0 (kernels.h's relu_pass).
float relu_pass(float y, float g) { return y <= 0.0 ? 0.0 : g; }
