// Float32 math for the element-wise shaders (unary.comp,
// elementwise_backward.comp): exp, log, log1p, expm1, tanh, erf, erfc and
// pow written out, because the built-ins Vulkan gives (exp, log, pow, tanh)
// are only promised to 3 ulp plus 2 |x| ulp (or an absolute 2^-21 for log
// near 1), vary between drivers, and GLSL has no erf: the CPU kernels round
// their libm's (or SLEEF's) 1-ulp results, and these come within a few ulp
// of them on every device. Range reduction plus a polynomial, the
// polynomials fitted to the functions by Chebyshev interpolation (their
// float32 evaluation errors are in the comments). Anything whose rounding
// matters is `precise` so that no compiler fuses or reorders it.

#define kInf uintBitsToFloat(0x7f800000u)
#define kNaN uintBitsToFloat(0x7fc00000u)
const float kLn2Hi = 0.693359375;       // ln 2's first 9 bits: n kLn2Hi is exact for |n| < 2^15
const float kLn2Lo = -2.12194440e-4;    // ln 2 - kLn2Hi
const float kLog2e = 1.44269504089;

// 2^n for |n| <= 254 as a product of two normal powers (one power of two
// would overflow at n = 128, where x 2^n can still be finite).
float scale2(float y, int n) {
  const int a = n / 2, b = n - a;
  return y * intBitsToFloat((a + 127) << 23) * intBitsToFloat((b + 127) << 23);
}

// e^(hi + lo) for a small correction lo (lo = 0 for plain exp): x = n ln2 + r,
// |r| <= ln2 / 2, e^r = 1 + r + r^2 Q(r) (within 6.2e-8 relative in float32).
float exp_hilo(float hi, float lo) {
  if (isnan(hi)) return hi;
  if (hi > 88.8) return kInf;
  if (hi < -104.0) return 0.0;
  const float n = floor(hi * kLog2e + 0.5);
  precise float r = hi - n * kLn2Hi;  // exact (Sterbenz)
  r = r - n * kLn2Lo;
  r = r + lo;
  const float q = ((((1.989098091e-4 * r + 1.393364160e-3) * r + 8.333310485e-3) * r + 4.166646674e-2) * r +
                   1.666666716e-1) * r + 0.5;
  precise float y = (r * r * q + r) + 1.0;
  return scale2(y, int(n));
}
float exp_f(float x) { return exp_hilo(x, 0.0); }

// log x as hi + lo (|lo| below hi's ulp): x = 2^e (1 + f), sqrt(1/2) <= 1 + f < sqrt 2,
// log(1 + f) = f - f^2 / 2 + f^3 R(f) (within 7e-8 relative in float32). For x > 0, finite.
void log_hilo(float x, out float hi, out float lo) {
  int e = 0;
  if (x < 1.17549435e-38) {  // subnormal (where the device keeps them)
    x *= 33554432.0;         // 2^25
    e = -25;
  }
  const int bits = floatBitsToInt(x);
  e += ((bits >> 23) & 0xff) - 127;
  float m = intBitsToFloat((bits & 0x007fffff) | 0x3f800000);  // [1, 2)
  if (m > 1.41421356) {
    m *= 0.5;
    e += 1;
  }
  precise float f = m - 1.0;  // exact (Sterbenz)
  const float z = f * f;
  const float rf = ((((((((6.971611828e-2 * f - 1.147973388e-1) * f + 1.168541983e-1) * f - 1.242568716e-1) * f +
                        1.424905807e-1) * f - 1.666780263e-1) * f + 2.000071555e-1) * f - 2.499999702e-1) * f +
                    3.333333135e-1);
  precise float c = z * f * rf - 0.5 * z;  // log(1 + f) - f
  const float fe = float(e);
  precise float a = fe * kLn2Hi;  // exact
  precise float s = a + f;
  // s's rounding error (two-sum), then the small terms.
  precise float bb = s - a;
  precise float err = (a - (s - bb)) + (f - bb);
  precise float l = err + (fe * kLn2Lo + c);
  precise float h = s + l;
  hi = h;
  lo = l - (h - s);
}

// NaN below 0 and for NaN, -inf at 0, +inf at +inf, as std::log.
float log_f(float x) {
  if (isnan(x) || x < 0.0) return kNaN;
  if (x == 0.0) return -kInf;
  if (isinf(x)) return x;
  float hi, lo;
  log_hilo(x, hi, lo);
  return hi + lo;
}

// log(1 + u) for u >= 0 (Softplus's u = e^-|x|): log(w) u / (w - 1) with
// w = 1 + u rounded, the quotient undoing w's rounding (Goldberg 1991).
float log1p_f(float u) {
  precise float w = 1.0 + u;
  if (w == 1.0) return u;
  precise float d = w - 1.0;
  return log_f(w) * (u / d);
}

// e^x - 1 without cancellation near 0 (Kahan's u = e^x; (u - 1) x / log u).
float expm1_f(float x) {
  if (isnan(x)) return x;
  if (x > 88.8) return kInf;
  const float u = exp_f(x);
  if (u == 1.0) return x;
  precise float d = u - 1.0;
  if (d == -1.0) return -1.0;
  return d * (x / log_f(u));
}

// tanh: x + x^3 T(x^2) below 0.625 (within 7e-8 relative), 1 - 2 / (e^2|x| + 1) above.
float tanh_f(float x) {
  const float a = abs(x);
  if (a > 0.625) {
    const float r = 1.0 - 2.0 / (exp_f(2.0 * a) + 1.0);
    return x < 0.0 ? -r : r;
  }
  const float u = x * x;
  const float t = ((((2.292744815e-3 * u - 8.343945257e-3) * u + 2.176891826e-2) * u - 5.395925790e-2) * u +
                   1.333330423e-1) * u - 3.333333433e-1;
  return x + x * u * t;
}

// erfc(z) for z >= 0: t e^(-z^2 + P(t)) with t = 1 / (1 + z / 2) (the form of
// Numerical Recipes' erfcc), P a Chebyshev series in t over z in [0, 10.1]
// (within 1.3e-7 absolute in float32, 3e-9 in exact arithmetic); e^(-z^2)
// as e^(-zh^2) e^(-(z - zh)(z + zh)) with zh z's leading 12 bits, so that
// zh^2 is exact (z^2 rounded would cost 4e-6 relative by z = 10). 0 past 10.1,
// where erfc is below float32's smallest subnormal.
float erfc_pos(float z) {
  if (isnan(z)) return z;
  if (z > 10.1) return 0.0;
  const float t = 1.0 / (1.0 + 0.5 * z);
  const float ta = 1.652892530e-1;  // t at z = 10.1
  const float s = (2.0 * t - ta - 1.0) / (1.0 - ta);
  const float c[12] = float[12](-5.520274639e-01, 5.510592461e-01, 7.350181695e-03, -6.392904557e-03,
                                -1.633432112e-04, 1.823828061e-04, -2.383355195e-06, -6.502135420e-06,
                                5.680485629e-07, 2.187112216e-07, -4.500985540e-08, -4.698081479e-09);
  float b1 = 0.0, b2 = 0.0;  // Clenshaw's recurrence
  for (int k = 11; k >= 1; --k) {
    const float b0 = 2.0 * s * b1 - b2 + c[k];
    b2 = b1;
    b1 = b0;
  }
  const float p = s * b1 - b2 + c[0];
  const float zh = uintBitsToFloat(floatBitsToUint(z) & 0xfffff000u);
  precise float d = (z - zh) * (z + zh);
  return t * exp_f(-zh * zh) * exp_f(p - d);
}
float erfc_f(float x) { return x < 0.0 ? 2.0 - erfc_pos(-x) : erfc_pos(x); }

// erf: x P(x^2) below 1 (within 5.5e-8 relative in float32), 1 - erfc(|x|) above.
float erf_f(float x) {
  if (isnan(x)) return x;
  const float a = abs(x);
  if (a < 1.0) {
    const float u = x * x;
    return x * (((((-5.648059887e-04 * u + 4.921761807e-03) * u - 2.671505511e-02) * u + 1.128031686e-01) * u -
                 3.761234283e-01) * u + 1.128379107e+00);
  }
  const float r = 1.0 - erfc_pos(a);
  return x < 0.0 ? -r : r;
}

// Whether y is an odd integer (every float32 from 2^24 up is even).
bool odd_integer(float y) { return abs(y) < 16777216.0 && y == floor(y) && (int(y) & 1) != 0; }

// std::pow's values (C99 Annex F.9.4.4): x^0 = 1 and 1^y = 1 even for NaN;
// a negative x only with an integer y (sign from its parity), NaN otherwise;
// zeros and infinities by the limits. |x|^y = e^(y log|x|), log|x| and the
// product carried as hi + lo (Dekker's exact product) so that a large
// exponent y log|x| keeps its low bits.
float pow_f(float x, float y) {
  if (y == 0.0 || x == 1.0) return 1.0;
  if (isnan(x) || isnan(y)) return kNaN;
  const bool odd = odd_integer(y);
  const float ax = abs(x);
  if (isinf(y)) {
    if (ax == 1.0) return 1.0;
    return (ax < 1.0) == (y < 0.0) ? kInf : 0.0;
  }
  if (x == 0.0 || isinf(x)) {
    // 0^y and inf^y: magnitude 0 or inf, sign of x when y is an odd integer.
    const bool big = (x == 0.0) == (y < 0.0);
    const float m = big ? kInf : 0.0;
    return odd && (floatBitsToUint(x) >> 31) != 0u ? -m : m;  // -0 too
  }
  if (x < 0.0 && y != floor(y)) return kNaN;
  float lh, ll;
  log_hilo(ax, lh, ll);
  precise float p = y * lh;
  float r;
  if (abs(p) > 150.0) {
    r = p > 0.0 ? kInf : 0.0;
  } else {
    // p's rounding error from Veltkamp's splits (4097 = 2^12 + 1).
    precise float cy = 4097.0 * y;
    precise float yh = cy - (cy - y);
    precise float yl = y - yh;
    precise float cl = 4097.0 * lh;
    precise float lhh = cl - (cl - lh);
    precise float lhl = lh - lhh;
    precise float perr = ((yh * lhh - p) + yh * lhl + yl * lhh) + yl * lhl;
    r = abs(y) > 1e30 ? exp_f(p) : exp_hilo(p, perr + y * ll);
  }
  return odd && x < 0.0 ? -r : r;
}

// std::sqrt: NaN below 0 (GLSL leaves sqrt of a negative undefined), -0 at -0.
float sqrt_f(float x) {
  if (isnan(x) || x < 0.0) return kNaN;
  if (x == 0.0 || isinf(x)) return x;
  return sqrt(x);
}
