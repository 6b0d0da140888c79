/* half_test.c: unit test of ref/half.c: exhaustive round trips, GCC's _Float16 as a second
 * opinion, every fp16/bf16 tie, and an independent bf16 rounding. Not a test of forward's F16C loads.
 *
 * Second opinions, each written differently from half.c's shift-and-round of the double's bits:
 * GCC's _Float16 casts (libgcc soft-fp, one rounding from double); and round-to-odd to fp32
 * followed by a round-to-nearest-even from fp32 (integer trick for bf16, _Float16 for fp16),
 * which rounds once because fp32 keeps at least 13 more bits than fp16 and 16 more than bf16
 * over their whole range, subnormals included.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bits.h"
#include "half.h"
#include "test_util.h"

/* Random draws per randomized comparison; a few seconds in all. */
#define RANDOM_DRAWS (1u << 23)

static uint64_t splitmix64(uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The two 16-bit formats, described once so every check runs on both. */
typedef struct {
  const char *name;
  int man_bits;      /* fraction bits */
  int bias;
  uint16_t max_finite;
  uint16_t inf;
  float (*widen)(uint16_t);
  uint16_t (*from_double)(double);
  uint16_t (*from_float)(float);
} format;

static uint16_t from_float_half(float f) { return ref_float_to_half(f); }
static uint16_t from_float_bf16(float f) { return ref_float_to_bf16(f); }

static const format fp16 = {"fp16", 10, 15, 0x7BFF, 0x7C00, ref_half_to_float,
                            ref_double_to_half, from_float_half};
static const format bf16 = {"bf16", 7, 127, 0x7F7F, 0x7F80, ref_bf16_to_float,
                            ref_double_to_bf16, from_float_bf16};

static int is_nan16(const format *f, uint16_t h)
{
  return (h & f->inf) == f->inf && (h & ((1u << f->man_bits) - 1u)) != 0;
}

/* Equal bits, or both NaN with the same sign (NaN payloads are not specified). */
static int same16(const format *f, uint16_t a, uint16_t b)
{
  return a == b || (is_nan16(f, a) && is_nan16(f, b) && (a >> 15) == (b >> 15));
}

/* The value of bit pattern h, computed from its fields with ldexp (not from half.c's code). */
static double value16(const format *f, uint16_t h)
{
  int exp = (h & 0x7FFF) >> f->man_bits;
  int man = h & ((1 << f->man_bits) - 1);
  double v = exp == 0 ? ldexp(man, 1 - f->bias - f->man_bits)
                      : ldexp(man + (1 << f->man_bits), exp - f->bias - f->man_bits);
  return (h >> 15) ? -v : v;
}

static uint16_t gcc_half_from_double(double x)
{
  volatile double vx = x; /* a runtime conversion, not GCC's constant folding */
  _Float16 h = (_Float16)vx;
  uint16_t u;
  memcpy(&u, &h, sizeof u);
  return u;
}
static uint16_t gcc_half_from_float(float x)
{
  volatile float vx = x;
  _Float16 h = (_Float16)vx;
  uint16_t u;
  memcpy(&u, &h, sizeof u);
  return u;
}
static float gcc_half_to_float(uint16_t u)
{
  _Float16 h;
  memcpy(&h, &u, sizeof h);
  volatile _Float16 vh = h;
  return (float)vh;
}

/* x rounded to fp32 with round-to-odd: toward zero, then the last bit set if inexact. */
static float float_round_to_odd(double x)
{
  float f = (float)x;
  if (isnan(x) || (double)f == x)
    return f;
  if (fabs((double)f) > fabs(x))
    f = nextafterf(f, 0.0f);
  return ref_bits_f32(ref_f32_bits(f) | 1u);
}

/* fp32 -> bf16, round to nearest even, by the integer-add trick (no shifts of a significand). */
static uint16_t bf16_from_float_int(float f)
{
  uint32_t u = ref_f32_bits(f);
  if (isnan(f))
    return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static uint16_t independent_from_double(const format *f, double x)
{
  float r = float_round_to_odd(x);
  return f == &bf16 ? bf16_from_float_int(r) : gcc_half_from_float(r);
}

/* Every bit pattern: widening gives the value its fields say; narrowing the widened value (from
 * fp32 and from fp64) gives the pattern back; NaN stays NaN with its sign. */
static void check_round_trips(const format *f)
{
  for (uint32_t i = 0; i <= 0xFFFF; i++) {
    uint16_t h = (uint16_t)i;
    float w = f->widen(h);
    if (is_nan16(f, h)) {
      CHECK(isnan(w) && !!signbit(w) == (h >> 15), "%s 0x%04X widens to %a", f->name, h,
            (double)w);
      uint16_t back = f->from_float(w), backd = f->from_double((double)w);
      CHECK(is_nan16(f, back) && (back >> 15) == (h >> 15), "%s NaN 0x%04X -> 0x%04X", f->name, h,
            back);
      CHECK(is_nan16(f, backd) && (backd >> 15) == (h >> 15), "%s NaN 0x%04X -> 0x%04X (fp64)",
            f->name, h, backd);
      continue;
    }
    int is_inf = (h & 0x7FFF) == f->inf;
    double expect = is_inf ? ((h >> 15) ? -INFINITY : INFINITY) : value16(f, h);
    CHECK((double)w == expect && !!signbit(w) == (h >> 15), "%s 0x%04X widens to %a, not %a",
          f->name, h, (double)w, expect);
    CHECK(f->from_float(w) == h, "%s 0x%04X -> %a -> 0x%04X", f->name, h, (double)w,
          f->from_float(w));
    CHECK(f->from_double((double)w) == h, "%s 0x%04X -> %a -> 0x%04X (fp64)", f->name, h,
          (double)w, f->from_double((double)w));
  }
}

/* Widening, bit for bit, NaNs included: fp16 as GCC (and F16C) widen, quieting a signalling
 * NaN and keeping its payload; bf16 as the plain 16-bit shift. */
static void check_widen_bits(void)
{
  for (uint32_t i = 0; i <= 0xFFFF; i++) {
    uint16_t h = (uint16_t)i;
    float a = ref_half_to_float(h), g = gcc_half_to_float(h);
    CHECK(ref_f32_bits(a) == ref_f32_bits(g), "fp16 0x%04X widens to 0x%08X, GCC 0x%08X", h, ref_f32_bits(a), ref_f32_bits(g));
    CHECK(ref_f32_bits(ref_bf16_to_float(h)) == i << 16, "bf16 0x%04X widens to 0x%08X", h,
          ref_f32_bits(ref_bf16_to_float(h)));
  }
}

/* bf16 subnormals are exactly the fp32 subnormals with 16 trailing zero bits. */
static void check_bf16_subnormals(void)
{
  for (uint32_t man = 1; man < 0x80; man++) {
    float w = ref_bf16_to_float((uint16_t)man);
    CHECK(fpclassify(w) == FP_SUBNORMAL && (double)w == ldexp(man, -133),
          "bf16 subnormal 0x%04X widens to %a", man, (double)w);
    CHECK(ref_float_to_bf16(w) == man && ref_double_to_bf16(ldexp(man, -133)) == man,
          "bf16 subnormal 0x%04X does not round-trip", man);
  }
  CHECK(ref_double_to_bf16(ldexp(1, -134)) == 0x0000, "half the smallest bf16 subnormal -> 0");
  CHECK(ref_double_to_bf16(nextafter(ldexp(1, -134), 1)) == 0x0001, "just above -> 0x0001");
  CHECK(ref_double_to_bf16(ldexp(3, -134)) == 0x0002, "1.5 * 2^-133 ties to even 0x0002");
  CHECK(ref_double_to_bf16(ldexp(0xFF, -134)) == 0x0080, "0x7F.8 * 2^-133 rounds to min normal");
  CHECK(ref_double_to_bf16(FLT_TRUE_MIN) == 0x0000, "fp32's smallest subnormal -> 0");
  CHECK(ref_double_to_bf16(-FLT_MIN) == 0x8080, "-FLT_MIN is bf16 -min normal");
}

/* Signed zeros, underflow to signed zero, fp64 subnormals, infinities, NaN, overflow. */
static void check_specials(const format *f)
{
  uint16_t qnan = (uint16_t)(f->inf | (1u << (f->man_bits - 1)));
  CHECK(f->from_double(0.0) == 0x0000, "%s +0", f->name);
  CHECK(f->from_double(-0.0) == 0x8000, "%s -0", f->name);
  CHECK(f->from_float(-0.0f) == 0x8000, "%s -0 (fp32)", f->name);
  CHECK(f->from_double(1e-300) == 0x0000, "%s tiny", f->name);
  CHECK(f->from_double(-1e-300) == 0x8000, "%s -tiny", f->name);
  CHECK(f->from_double(DBL_TRUE_MIN) == 0x0000, "%s fp64 min subnormal", f->name);
  CHECK(f->from_double(-DBL_TRUE_MIN) == 0x8000, "%s -fp64 min subnormal", f->name);
  CHECK(f->from_double(-DBL_MIN) == 0x8000, "%s -DBL_MIN", f->name);
  CHECK(f->from_double(INFINITY) == f->inf, "%s +Inf", f->name);
  CHECK(f->from_double(-INFINITY) == (f->inf | 0x8000), "%s -Inf", f->name);
  CHECK(f->from_double(DBL_MAX) == f->inf, "%s DBL_MAX overflows", f->name);
  CHECK(f->from_double(-DBL_MAX) == (f->inf | 0x8000), "%s -DBL_MAX overflows", f->name);
  CHECK(f->from_double(1e300) == f->inf, "%s 1e300", f->name);
  CHECK(f->from_double(NAN) == qnan, "%s NaN is the quiet NaN", f->name);
  CHECK(f->from_double(-NAN) == (qnan | 0x8000), "%s -NaN keeps its sign", f->name);
  /* a signalling NaN with payload only in the low bits must not become Inf */
  double snan = ref_bits_f64(0x7FF0000000000001ull), nsnan = ref_bits_f64(0xFFF0000000000001ull);
  CHECK(is_nan16(f, f->from_double(snan)) && !(f->from_double(snan) >> 15), "%s sNaN", f->name);
  CHECK(is_nan16(f, f->from_double(nsnan)) && (f->from_double(nsnan) >> 15), "%s -sNaN",
        f->name);
  CHECK(is_nan16(f, f->from_float(ref_bits_f32(0x7F800001u))), "%s fp32 sNaN", f->name);

  /* overflow boundary: the largest finite value, the midpoint to 2^(emax+1), around it */
  double max = value16(f, f->max_finite);
  double mid = max + (ldexp(1.0, f->bias + 1) - max) / 2;
  CHECK(f->from_double(max) == f->max_finite, "%s max finite", f->name);
  CHECK(f->from_double(nextafter(mid, 0)) == f->max_finite, "%s just below overflow", f->name);
  CHECK(f->from_double(mid) == f->inf, "%s overflow midpoint rounds to Inf", f->name);
  CHECK(f->from_double(-mid) == (f->inf | 0x8000), "%s -overflow midpoint", f->name);
  CHECK(f->from_double(-nextafter(mid, 0)) == (f->max_finite | 0x8000), "%s -just below",
        f->name);
}

static void check_half_overflow_literals(void)
{
  CHECK(ref_double_to_half(65504.0) == 0x7BFF, "65504");
  CHECK(ref_double_to_half(65519.99) == 0x7BFF, "65519.99");
  CHECK(ref_double_to_half(65520.0) == 0x7C00, "65520");
  CHECK(ref_float_to_half(65519.99f) == 0x7BFF, "65519.99f");
  CHECK(ref_float_to_half(65520.0f) == 0x7C00, "65520f");
  CHECK(ref_float_to_half(FLT_MAX) == 0x7C00, "FLT_MAX");
  CHECK(ref_double_to_half(-65520.0) == 0xFC00, "-65520");
  CHECK(ref_double_to_half(ldexp(1, -24)) == 0x0001, "fp16 min subnormal");
  CHECK(ref_double_to_half(ldexp(1, -25)) == 0x0000, "half the min subnormal ties to 0");
  CHECK(ref_double_to_half(ldexp(3, -25)) == 0x0002, "1.5 min subnormal ties to 0x0002");
  CHECK(ref_double_to_half(ldexp(0x7FF, -25)) == 0x0400, "0x3FF.8 * 2^-24 rounds to min normal");
  CHECK(ref_double_to_bf16(FLT_MAX) == 0x7F80, "bf16 FLT_MAX overflows (above the midpoint)");
  CHECK(ref_float_to_bf16(ref_bits_f32(0x7F7F8000u)) == 0x7F80, "bf16 overflow midpoint is Inf");
  CHECK(ref_float_to_bf16(ref_bits_f32(0x7F7F7FFFu)) == 0x7F7F, "bf16 just below overflow midpoint");
}

/* The spec's double-rounding examples: one rounding from fp64 differs from rounding via fp32. */
static void check_double_rounding_examples(void)
{
  double x = 1.0 + 0x1p-8 + 0x1p-40;
  CHECK(ref_double_to_bf16(x) == 0x3F81, "bf16(1 + 2^-8 + 2^-40) = 0x%04X", ref_double_to_bf16(x));
  CHECK(ref_float_to_bf16((float)x) == 0x3F80, "via fp32 it is 0x3F80");

  /* GCC's (_Float16)double rounds once (TBE_SEMANTICS.md section 3): 1 + 2^-11 is an fp16 tie,
   * and 2^-40 above it is lost in fp32, so via fp32 it would tie to even 0x3C00. */
  double y = 1.0 + 0x1p-11 + 0x1p-40;
  CHECK(gcc_half_from_double(y) == 0x3C01, "GCC (_Float16)double = 0x%04X, not one rounding",
        gcc_half_from_double(y));
  CHECK(gcc_half_from_float((float)y) == 0x3C00, "GCC via fp32 = 0x%04X",
        gcc_half_from_float((float)y));
  CHECK(ref_double_to_half(y) == 0x3C01, "ref fp16(1 + 2^-11 + 2^-40) = 0x%04X",
        ref_double_to_half(y));
  CHECK(ref_double_to_half(-y) == 0xBC01, "ref fp16(-(1 + 2^-11 + 2^-40))");
}

/* Narrows x both ways (ref and the second opinions) and compares; with_gcc adds GCC for fp16. */
static void compare_double(const format *f, double x)
{
  uint16_t r = f->from_double(x);
  uint16_t o = independent_from_double(f, x);
  CHECK(same16(f, r, o), "%s(%a) = 0x%04X, round-to-odd says 0x%04X", f->name, x, r, o);
  if (f == &fp16) {
    uint16_t g = gcc_half_from_double(x);
    CHECK(same16(f, r, g), "fp16(%a) = 0x%04X, GCC says 0x%04X", x, r, g);
  }
}

static void compare_float(const format *f, float x)
{
  uint16_t r = f->from_float(x);
  uint16_t o = f == &bf16 ? bf16_from_float_int(x) : gcc_half_from_float(x);
  CHECK(same16(f, r, o), "%s(%a f) = 0x%04X, second opinion 0x%04X", f->name, (double)x, r, o);
}

/* Every adjacent pair (lo, hi) of finite values, and (max finite, Inf) with hi = 2^(emax+1):
 * the exact midpoint ties to the even one; one ulp of fp64 (or fp32) either side rounds to the
 * nearer. Both signs; the midpoint as fp64 and, where it is exact there, as fp32. */
static void check_all_ties(const format *f)
{
  for (uint32_t lo = 0; lo <= f->max_finite; lo++) {
    uint16_t hi = (uint16_t)(lo + 1);
    double vlo = value16(f, (uint16_t)lo);
    double vhi = lo == f->max_finite ? ldexp(1.0, f->bias + 1) : value16(f, hi);
    double mid = vlo + (vhi - vlo) / 2;
    uint16_t even = (lo & 1) ? hi : (uint16_t)lo;
    CHECK(mid > vlo && mid < vhi, "%s midpoint of 0x%04X not exact", f->name, lo);
    for (int neg = 0; neg <= 1; neg++) {
      uint16_t s = neg ? 0x8000 : 0;
      double m = neg ? -mid : mid;
      double away = neg ? -INFINITY : INFINITY;
      uint16_t got = f->from_double(m);
      CHECK(got == (even | s), "%s tie %a -> 0x%04X, want 0x%04X", f->name, m, got, even | s);
      got = f->from_double(nextafter(m, away));
      CHECK(got == (hi | s), "%s above tie %a -> 0x%04X", f->name, m, got);
      got = f->from_double(nextafter(m, 0.0));
      CHECK(got == (lo | s), "%s below tie %a -> 0x%04X", f->name, m, got);
      compare_double(f, m);
      compare_double(f, nextafter(m, away));
      compare_double(f, nextafter(m, 0.0));

      float mf = (float)m;
      if ((double)mf != m)
        continue;
      float awayf = neg ? -INFINITY : INFINITY;
      got = f->from_float(mf);
      CHECK(got == (even | s), "%s fp32 tie %a -> 0x%04X", f->name, m, got);
      got = f->from_float(nextafterf(mf, awayf));
      CHECK(got == (hi | s), "%s fp32 above tie %a -> 0x%04X", f->name, m, got);
      got = f->from_float(nextafterf(mf, 0.0f));
      CHECK(got == (lo | s), "%s fp32 below tie %a -> 0x%04X", f->name, m, got);
      compare_float(f, mf);
      compare_float(f, nextafterf(mf, awayf));
      compare_float(f, nextafterf(mf, 0.0f));
    }
  }
}

/* A random double of one of four kinds: any bit pattern; any significand with an exponent in or
 * near the format's range (subnormals and overflow included); a short significand (exact values
 * and exact ties); a value a few fp64 ulps from a random midpoint. */
static double random_double(const format *f, uint64_t *s)
{
  uint64_t r = splitmix64(s), sign = (r & 1) << 63;
  int emin = 1 - f->bias - f->man_bits - 3, emax = f->bias + 2;
  int e = emin + (int)((r >> 8) % (uint64_t)(emax - emin + 1));
  uint64_t man = splitmix64(s) & 0xFFFFFFFFFFFFFull;
  switch ((r >> 1) & 3) {
  case 0:
    return ref_bits_f64(splitmix64(s));
  case 1:
    return ref_bits_f64(sign | ((uint64_t)(e + 1023) << 52) | man);
  case 2: {
    int keep = f->man_bits + 1 + (int)((r >> 40) % 4);
    man &= ~((1ull << (52 - keep)) - 1);
    return ref_bits_f64(sign | ((uint64_t)(e + 1023) << 52) | man);
  }
  default: {
    uint16_t h = (uint16_t)(splitmix64(s) % f->max_finite);
    double lo = value16(f, h), mid = lo + (value16(f, (uint16_t)(h + 1)) - lo) / 2;
    int64_t k = (int64_t)((r >> 40) % 9) - 4;
    return ref_bits_f64(ref_f64_bits(mid) + (uint64_t)k) * (sign ? -1.0 : 1.0);
  }
  }
}

static void check_random(const format *f, uint64_t seed)
{
  uint64_t s = seed;
  for (uint32_t i = 0; i < RANDOM_DRAWS; i++) {
    double x = random_double(f, &s);
    compare_double(f, x);
    /* the fp32 path, on x rounded to fp32 and on random fp32 patterns */
    compare_float(f, (float)x);
    compare_float(f, ref_bits_f32((uint32_t)splitmix64(&s)));
  }
}

/* The row conversions equal the scalar ones bit for bit: every 16-bit pattern widened, and
 * narrowing at every fp16/bf16 value, the midpoints around it and their fp32 neighbours, every
 * NaN class, and random fp32 patterns; rows of odd lengths reach the vector loops' tails. */
static void check_rows(void)
{
  enum { N = 65536 * 8 };
  static uint16_t h[N], got16[N], want16[N];
  static float f[N], got[N];
  for (uint32_t i = 0; i < 65536; i++)
    h[i] = (uint16_t)i;
  for (int k = 0; k < 2; k++) {
    if (k)
      ref_bf16_to_float_row(h, 65536, got);
    else
      ref_half_to_float_row(h, 65536, got);
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
      float want = k ? ref_bf16_to_float(h[i]) : ref_half_to_float(h[i]);
      bad += ref_f32_bits(got[i]) != ref_f32_bits(want);
    }
    CHECK(bad == 0, "%s widening rows: %d patterns differ", k ? "bf16" : "fp16", bad);
  }
  uint64_t s = 99;
  for (int k = 0; k < 2; k++) {
    for (uint32_t i = 0; i < 65536; i++) {
      float v = k ? ref_bf16_to_float((uint16_t)i) : ref_half_to_float((uint16_t)i);
      float up = k ? ref_bf16_to_float((uint16_t)(i + 1)) : ref_half_to_float((uint16_t)(i + 1));
      float mid = (float)(((double)v + (double)up) / 2); /* exact in fp32 for both formats */
      f[8 * i] = v;
      f[8 * i + 1] = mid;
      f[8 * i + 2] = nextafterf(mid, -INFINITY);
      f[8 * i + 3] = nextafterf(mid, INFINITY);
      f[8 * i + 4] = nextafterf(v, INFINITY);
      f[8 * i + 5] = ref_bits_f32((uint32_t)splitmix64(&s));
      f[8 * i + 6] = ref_bits_f32(0x7F800000u | (uint32_t)(splitmix64(&s) & 0x807FFFFFu)); /* NaN, Inf */
      f[8 * i + 7] = ref_bits_f32((uint32_t)splitmix64(&s) & 0x80FFFFFFu); /* tiny and subnormal */
    }
    for (int64_t len = N; len > N - 9; len--) {
      if (k)
        ref_float_to_bf16_row(f, len, got16);
      else
        ref_float_to_half_row(f, len, got16);
      int bad = 0;
      for (int64_t i = 0; i < len; i++) {
        want16[i] = k ? ref_float_to_bf16(f[i]) : ref_float_to_half(f[i]);
        bad += got16[i] != want16[i];
      }
      CHECK(bad == 0, "%s narrowing rows of %lld: %d values differ", k ? "bf16" : "fp16",
            (long long)len, bad);
    }
  }
}

int main(void)
{
  check_round_trips(&fp16);
  check_round_trips(&bf16);
  check_widen_bits();
  check_bf16_subnormals();
  check_specials(&fp16);
  check_specials(&bf16);
  check_half_overflow_literals();
  check_double_rounding_examples();
  check_all_ties(&fp16);
  check_all_ties(&bf16);
  check_random(&fp16, 1);
  check_random(&bf16, 2);
  check_rows();
  return TEST_MAIN_RESULT();
}
