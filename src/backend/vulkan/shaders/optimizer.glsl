// OptimizerTick (kernels/optimizer.cpp), included by optimizer_tick_f64.comp
// and optimizer_tick_f32x2.comp. The CPU evaluates the schedule and the bias
// corrections in double; so does this file, in a type R with its operations
// r_*: `double` where the device has shaderFloat64 (TICK_FP64), else a
// float pair (hi, lo) with hi + lo the value, about 48 bits, error-free
// transforms (Knuth's two-sum, Dekker's split and two-product). Two modules
// rather than one with a specialization constant: a module that names a
// double declares the Float64 capability, which a device without
// shaderFloat64 must not be given even in dead code. GLSL has no double
// exp, log or cos, so both forms use the same series below, written once.
//
// Exactness where the CPU's branches depend on it: whole powers are taken by
// repeated squaring (exact where the result is representable, as libm's
// pow), so a restart of CosineDecayRestarts falls on the same step; step
// counts convert exactly (below 2^48 for the pair).

layout(constant_id = 1) const uint KIND = 0;  // an LrScheduleKind
layout(push_constant) uniform Push { F32 hyper; I64 step; I64 steps; F32 values; Status status; uint n_steps; } p;

// HyperSlot (ops/op.h).
const uint kLr = 0, kBeta1 = 1, kBeta2 = 2, kBiasCorrection1 = 5, kBiasCorrection2 = 6, kDampening = 8,
           kStepDampening = 9;

#ifdef TICK_FP64
#define R double
R r_f(float x) { return double(x); }
R r_i(int64_t x) { return double(x); }
R r_add(R a, R b) { return a + b; }
R r_sub(R a, R b) { return a - b; }
R r_mul(R a, R b) { return a * b; }
R r_div(R a, R b) { return a / b; }
bool r_lt(R a, R b) { return a < b; }
bool r_le(R a, R b) { return a <= b; }
bool r_eq(R a, R b) { return a == b; }
bool r_isnan(R a) { return isnan(a); }
bool r_isinf(R a) { return isinf(a); }
R r_floor(R a) { return floor(a); }
float r_float(R a) { return float(a); }
double r_approx(R a) { return a; }
int64_t r_int64(R a) { return int64_t(a); }
R r_ldexp(R a, int e) {  // ldexp is undefined past the exponent range: scale in three steps
  e = clamp(e, -3000, 3000);
  return ldexp(ldexp(ldexp(a, e / 3), e / 3), e - 2 * (e / 3));
}
// a = m 2^e, m in [0.5, 1)
R r_frexp(R a, out int e) { return frexp(a, e); }
R r_ln2() { return 0.6931471805599453lf; }
R r_pi() { return 3.141592653589793lf; }
#else
#define R vec2
// Error-free transforms: `precise` keeps the compiler from fusing or
// reordering them. Dekker's split rather than fma: Vulkan lets fma round
// twice (its precision is that of a multiply then an add).
vec2 two_sum(float a, float b) {
  precise float s = a + b;
  if (isinf(s) || isnan(s)) return vec2(s, 0.0);
  precise float bb = s - a;
  precise float e = (a - (s - bb)) + (b - bb);
  return vec2(s, e);
}
vec2 quick_two_sum(float a, float b) {  // |a| >= |b|
  precise float s = a + b;
  if (isinf(s) || isnan(s)) return vec2(s, 0.0);
  precise float e = b - (s - a);
  return vec2(s, e);
}
vec2 split(float a) {
  precise float c = 4097.0 * a;  // 2^12 + 1 for a 24-bit significand
  precise float hi = c - (c - a);
  precise float lo = a - hi;
  return vec2(hi, lo);
}
vec2 two_prod(float a, float b) {
  precise float prod = a * b;
  if (isinf(prod) || isnan(prod) || prod == 0.0) return vec2(prod, 0.0);
  const vec2 x = split(a), y = split(b);
  precise float e = ((x.x * y.x - prod) + x.x * y.y + x.y * y.x) + x.y * y.y;
  return vec2(prod, e);
}
R r_f(float x) { return vec2(x, 0.0); }
R r_i(int64_t x) {
  // Two parts that convert exactly (below 2^48): the low 24 bits and the rest.
  const int64_t low = x & 0xffffffl;
  return two_sum(float(x - low), float(low));
}
R r_add(R a, R b) {
  precise vec2 s = two_sum(a.x, b.x);
  precise vec2 t = two_sum(a.y, b.y);
  s = quick_two_sum(s.x, s.y + t.x);
  return quick_two_sum(s.x, s.y + t.y);
}
R r_sub(R a, R b) { return r_add(a, -b); }
R r_mul(R a, R b) {
  precise vec2 prod = two_prod(a.x, b.x);
  if (isinf(prod.x) || isnan(prod.x)) return vec2(prod.x, 0.0);
  precise float lo = prod.y + (a.x * b.y + a.y * b.x);
  return quick_two_sum(prod.x, lo);
}
R r_div(R a, R b) {
  precise float q1 = a.x / b.x;
  if (isinf(q1) || isnan(q1) || b.x == 0.0) return vec2(q1, 0.0);
  // Two corrections from the exact remainders, so that a quotient the pair
  // can hold comes out exact (restart boundaries compare it).
  R r = r_sub(a, r_mul(r_f(q1), b));
  precise float q2 = r.x / b.x;
  r = r_sub(r, r_mul(r_f(q2), b));
  precise float q3 = r.x / b.x;
  return r_add(quick_two_sum(q1, q2), r_f(q3));
}
bool r_lt(R a, R b) { return a.x < b.x || (a.x == b.x && a.y < b.y); }
bool r_le(R a, R b) { return a.x < b.x || (a.x == b.x && a.y <= b.y); }
bool r_eq(R a, R b) { return a.x == b.x && a.y == b.y; }
bool r_isnan(R a) { return isnan(a.x) || isnan(a.y); }
bool r_isinf(R a) { return isinf(a.x); }
R r_floor(R a) {
  const float hi = floor(a.x);
  return hi == a.x ? quick_two_sum(hi, floor(a.y)) : vec2(hi, 0.0);
}
float r_float(R a) {
  precise float v = a.x + a.y;
  return v;
}
float r_approx(R a) { return a.x; }
int64_t r_int64(R a) { return int64_t(a.x) + int64_t(a.y); }
R r_ldexp(R a, int e) {  // ldexp is undefined past the exponent range: scale in three steps
  e = clamp(e, -400, 400);
  const int s = e / 3, rest = e - 2 * (e / 3);
  return vec2(ldexp(ldexp(ldexp(a.x, s), s), rest), ldexp(ldexp(ldexp(a.y, s), s), rest));
}
R r_frexp(R a, out int e) {
  const float m = frexp(a.x, e);
  return vec2(m, ldexp(a.y, -e));
}
R r_ln2() { return vec2(6.931471825e-01, -1.904654212e-09); }
R r_pi() { return vec2(3.141592741e+00, -8.742277657e-08); }
#endif

R r_one() { return r_f(1.0); }
R r_nan() { return r_f(uintBitsToFloat(0x7fc00000u)); }
R r_inf() { return r_f(uintBitsToFloat(0x7f800000u)); }

// b^n for a whole n, by repeated squaring.
R r_powi(R b, int64_t n) {
  const bool invert = n < 0;
  uint64_t k = uint64_t(invert ? -n : n);
  R result = r_one();
  while (k != 0ul) {
    if ((k & 1ul) != 0ul) result = r_mul(result, b);
    k >>= 1;
    if (k != 0ul) b = r_mul(b, b);
  }
  return invert ? r_div(r_one(), result) : result;
}

// e^y: y = n ln2 + r, |r| <= ln2 / 2, e^r by its Taylor series (20 terms
// leave under 1e-27).
R r_exp(R y) {
  if (r_isnan(y)) return y;
  const float a = float(r_approx(y));
  if (a > 1000.0) return r_inf();
  if (a < -1100.0) return r_f(0.0);
  const int n = int(round(a / 0.6931471805599453));
  const R r = r_sub(y, r_mul(r_i(int64_t(n)), r_ln2()));
  R s = r_one();
  for (int k = 20; k >= 1; --k) s = r_add(r_one(), r_div(r_mul(r, s), r_f(float(k))));
  return r_ldexp(s, n);
}

// log b for a finite b > 0: b = m 2^e with m in [sqrt(1/2), sqrt(2)),
// log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by its series.
R r_log(R b) {
  int e;
  R m = r_frexp(b, e);
  if (r_lt(m, r_f(0.70710678))) {
    m = r_ldexp(m, 1);
    e -= 1;
  }
  const R s = r_div(r_sub(m, r_one()), r_add(m, r_one()));
  const R s2 = r_mul(s, s);
  R sum = r_div(r_one(), r_f(33.0));
  for (int k = 15; k >= 0; --k) sum = r_add(r_div(r_one(), r_f(float(2 * k + 1))), r_mul(s2, sum));
  return r_add(r_mul(r_i(int64_t(e)), r_ln2()), r_mul(r_add(s, s), sum));
}

// b^x as std::pow for a finite b (a float32 schedule value) and any x.
R r_pow(R b, R x) {
  if (r_eq(x, r_f(0.0)) || r_eq(b, r_one())) return r_one();
  if (r_isnan(b) || r_isnan(x)) return r_nan();
  if (r_eq(r_floor(x), x) && abs(float(r_approx(x))) < 1e9) return r_powi(b, r_int64(x));
  if (r_lt(b, r_f(0.0))) return r_nan();
  if (r_eq(b, r_f(0.0))) return r_lt(r_f(0.0), x) ? r_f(0.0) : r_inf();
  if (r_isinf(b)) return r_lt(r_f(0.0), x) ? r_inf() : r_f(0.0);
  return r_exp(r_mul(x, r_log(b)));
}

// cos(pi z)^2 for z in [0, 1/2], by the Taylor series of cos(pi z) or, past
// 1/4, of sin(pi (1/2 - z)), in one loop (each call site of a function is
// a copy of it in the module).
R cospi_squared(R z) {
  const bool sine = r_lt(r_f(0.25), z);
  const R x = r_mul(r_pi(), sine ? r_sub(r_f(0.5), z) : z), x2 = r_mul(x, x);
  const int odd = sine ? 1 : 0;
  R s = r_one();
  for (int k = 11; k >= 1; --k) s = r_sub(r_one(), r_div(r_mul(x2, s), r_f(float((2 * k - 1 + odd) * (2 * k + odd)))));
  const R c = sine ? r_mul(x, s) : s;
  return r_mul(c, c);
}

float value(uint i) { return p.values.v[i]; }
int64_t step_at(uint i) { return p.steps.v[i]; }

// SGDR's restart period start(k) = (1 - t_mul^k) / (1 - t_mul), and t_mul^k.
R restart_start(R t_mul, int64_t k, out R power) {
  power = r_powi(t_mul, k);
  return r_div(r_sub(r_one(), power), r_sub(r_one(), t_mul));
}

// The period k of CosineDecayRestarts that t falls in (the CPU's
// restart_period): start(k) <= done < start(k + 1), with done = t / first
// periods; returns how much of it is done. The logarithm only guesses k;
// the comparisons settle it as on the CPU's loops (here bounded: a guess off
// by more is no rounding).
R restart_period(int64_t t, R t_mul, out int64_t k) {
  const int64_t first = step_at(0);
  if (value(1) == 1.0) {
    k = t / first;
    return r_div(r_i(t % first), r_i(first));
  }
  const R done = r_div(r_i(t), r_i(first));
  R logs[2] = {r_sub(r_one(), r_mul(done, r_sub(r_one(), t_mul))), t_mul};
  if (r_isnan(logs[0]) || r_le(logs[0], r_f(0.0)) || value(1) <= 0.0) return r_nan();
  for (int j = 0; j < 2; ++j) logs[j] = r_log(logs[j]);
  const float guess = float(r_approx(r_floor(r_div(logs[0], logs[1]))));
  if (isnan(guess) || isinf(guess)) return r_nan();
  k = int64_t(clamp(guess, 0.0, 1e9));
  R start = r_f(0.0), power = r_one();  // start(0), t_mul^0
  bool down = k > 0;
  for (int i = 0; i < 128; ++i) {
    R pw;
    const R s = restart_start(t_mul, down ? k : k + 1, pw);
    if (down) {  // while start(k) > done: k -= 1
      if (r_lt(done, s)) {
        k -= 1;
        down = k > 0;
      } else {
        start = s;
        power = pw;
        down = false;
      }
    } else {  // while start(k + 1) <= done: k += 1
      if (!r_le(s, done)) break;
      k += 1;
      start = s;
      power = pw;
    }
  }
  return r_div(r_sub(done, start), power);
}

R scheduled_learning_rate(int64_t t) {
  if (KIND == 1) {  // kPiecewiseConstantDecay: the last step is the INT64_MAX marker
    uint i = 0;
    while (i + 1 < p.n_steps && t > step_at(i)) ++i;
    return r_f(value(i));
  }
  if (KIND == 2) {  // kExponentialDecay
    const int64_t decay_steps = step_at(0);
    const R e = step_at(1) != 0l ? r_i(t / decay_steps) : r_div(r_i(t), r_i(decay_steps));
    return r_mul(r_f(value(0)), r_pow(r_f(value(1)), e));
  }
  // The cosine decays: from ((1 - alpha) scale half_cosine(done) + alpha).
  R from = r_f(value(0)), alpha, scale = r_one(), done;
  if (KIND == 3) {  // kCosineDecay
    const int64_t decay_steps = step_at(0), warmup_steps = step_at(1);
    alpha = r_f(value(1));
    int64_t into_decay = t;
    if (step_at(2) != 0l) {  // warmup_target: a linear ramp to it first, then the decay from it
      const R target = r_f(value(2));
      if (t < warmup_steps) return r_add(from, r_mul(r_sub(target, from), r_div(r_i(t), r_i(warmup_steps))));
      from = target;
      into_decay = t - warmup_steps;
    }
    done = r_div(r_i(min(into_decay, decay_steps)), r_i(decay_steps));
  } else {  // kCosineDecayRestarts
    alpha = r_f(value(3));
    int64_t k = 0;
    done = restart_period(t, r_f(value(1)), k);
    if (r_isnan(done)) return done;
    scale = r_powi(r_f(value(2)), k);
  }
  // The CPU's half_cosine(done) = 0.5 (1 + cos(pi done)), as cos(pi done / 2)^2: the same value without the
  // cancellation of 1 + cos near done = 1 (which the pair's precision could not afford).
  const R half_cosine = cospi_squared(r_mul(done, r_f(0.5)));
  return r_mul(from, r_add(r_mul(r_mul(r_sub(r_one(), alpha), scale), half_cosine), alpha));
}

void main() {
  if (gl_GlobalInvocationID.x != 0 || skip_update(p.status)) return;
  const int64_t t0 = p.step.v[0];
  if (KIND != 0) p.hyper.v[kLr] = r_float(scheduled_learning_rate(t0));  // before the increment, as Keras
  const int64_t t = t0 + 1;
  p.step.v[0] = t;
  for (uint j = 0; j < 2; ++j)  // a loop rather than two copies of the arithmetic
    p.hyper.v[kBiasCorrection1 + j] = r_float(r_div(r_one(), r_sub(r_one(), r_powi(r_f(p.hyper.v[kBeta1 + j]), t))));
  p.hyper.v[kStepDampening] = t == 1l ? 0.0 : p.hyper.v[kDampening];
}
