/* compare_test.c: the comparison must catch what it exists to catch: one element one ulp off
 * (every dtype), a NaN on one side, an Inf of the wrong sign, a bound exceeded by a hair, a
 * bound that is NaN or Inf (it checks nothing, so it fails), an Inf on either side of each
 * dtype's overflow threshold, and a wrong first or last element
 * under every metric (fault cmp_skip_last, fuzz/FAULTS.md).
 */
#include <math.h>
#include <string.h>

#include "compare.h"
#include "half.h"
#include "test_util.h"

enum { N = 1000 };

static void fill(tbe_dtype t, void *a, int64_t i, double v)
{
  if (t == TBE_FP32)
    ((float *)a)[i] = (float)v;
  else if (t == TBE_FP16)
    ((uint16_t *)a)[i] = ref_double_to_half(v);
  else
    ((uint16_t *)a)[i] = ref_double_to_bf16(v);
}

static void bump_one_ulp(tbe_dtype t, void *a, int64_t i)
{
  if (t == TBE_FP32) {
    uint32_t u;
    memcpy(&u, (float *)a + i, 4);
    u++;
    memcpy((float *)a + i, &u, 4);
  } else {
    ((uint16_t *)a)[i]++;
  }
}

static void test_one_ulp(void)
{
  static float fa[N], fb[N];
  for (int t = 0; t < 3; t++) {
    void *a = fa, *b = fb;
    for (int64_t i = 0; i < N; i++)
      fill((tbe_dtype)t, a, i, sin((double)i) * 100);
    memcpy(b, a, sizeof fa);
    cmp_result r;
    cmp_init(&r, CMP_BITWISE, 4);
    cmp_bitwise(&r, (tbe_dtype)t, a, b, N);
    CHECK(r.violations == 0 && r.exact == N, "dtype %d: identical arrays flagged", t);
    cmp_free(&r);
    bump_one_ulp((tbe_dtype)t, b, 517);
    cmp_init(&r, CMP_BITWISE, 4);
    cmp_bitwise(&r, (tbe_dtype)t, a, b, N);
    CHECK(r.violations == 1 && r.exact == N - 1 && r.max_ulp == 1 && r.first[0].index == 517,
          "dtype %d: one ulp at 517: violations %lld max_ulp %lld", t, (long long)r.violations,
          (long long)r.max_ulp);
    cmp_free(&r);

    /* bound metric: exact = a, bound = 0 everywhere: the bumped element violates */
    static double exact[N], bound[N];
    for (int64_t i = 0; i < N; i++) {
      exact[i] = cmp_value((tbe_dtype)t, a, i);
      bound[i] = 0;
    }
    cmp_init(&r, CMP_BOUND, 4);
    cmp_bound(&r, (tbe_dtype)t, exact, bound, b, N);
    CHECK(r.violations == 1 && r.first[0].index == 517 && isinf(r.worst_bound_ratio),
          "dtype %d: bound 0 must catch one ulp", t);
    cmp_free(&r);
    /* a bound of exactly the error passes with ratio 1; a hair less fails */
    double err = fabs(cmp_value((tbe_dtype)t, b, 517) - exact[517]);
    bound[517] = err;
    cmp_init(&r, CMP_BOUND, 4);
    cmp_bound(&r, (tbe_dtype)t, exact, bound, b, N);
    CHECK(r.violations == 0 && r.worst_bound_ratio == 1.0, "dtype %d: ratio %g", t,
          r.worst_bound_ratio);
    cmp_free(&r);
    bound[517] = nextafter(err, 0);
    cmp_init(&r, CMP_BOUND, 4);
    cmp_bound(&r, (tbe_dtype)t, exact, bound, b, N);
    CHECK(r.violations == 1 && r.worst_bound_ratio > 1.0, "dtype %d: bound a hair short", t);
    cmp_free(&r);
  }
}

static void test_nan_inf(void)
{
  float a[4] = {NAN, 1.0f, INFINITY, 0.0f}, b[4] = {NAN, NAN, -INFINITY, -0.0f};
  cmp_result r;
  cmp_init(&r, CMP_BITWISE, 4);
  cmp_bitwise(&r, TBE_FP32, a, b, 4);
  /* NaN==NaN passes; NaN vs 1 fails; +Inf vs -Inf fails; +0 vs -0 differ in bits */
  CHECK(r.violations == 3 && r.exact == 1, "NaN/Inf bitwise: %lld violations",
        (long long)r.violations);
  CHECK(r.first[0].index == 1 && r.first[1].index == 2 && r.first[2].index == 3, "order");
  cmp_free(&r);
  double exact[3] = {1.0, INFINITY, NAN}, bound[3] = {1e300, 1e300, 1e300};
  float g[3] = {NAN, -INFINITY, NAN};
  cmp_init(&r, CMP_BOUND, 4);
  cmp_bound(&r, TBE_FP32, exact, bound, g, 3);
  CHECK(r.violations == 2 && r.exact == 1, "NaN/Inf bound: %lld violations",
        (long long)r.violations);
  cmp_free(&r);

  /* overflow: fp16 stores Inf from 65520 up; allowed only where exact + bound reaches it */
  uint16_t h[2] = {0x7C00, 0x7C00};
  double ex2[2] = {65519.0, 65400.0}, bd2[2] = {2.0, 100.0};
  cmp_init(&r, CMP_BOUND, 4);
  cmp_bound(&r, TBE_FP16, ex2, bd2, h, 2);
  CHECK(r.violations == 1 && r.first[0].index == 1, "overflow rule: %lld violations",
        (long long)r.violations);
  cmp_free(&r);
}

/* The overflow rule at its edge, for every dtype: a finite exact value may store as Inf only
 * where exact + bound reaches the value that rounds to Inf (the largest finite M plus half its
 * ulp), not where it only passes M. Elements on both sides, in both signs: a threshold moved
 * to M (or to M plus a whole ulp) turns one of them. */
static void test_overflow_edge(void)
{
  static const struct {
    tbe_dtype t;
    double max, half_ulp;
  } dt[3] = {{TBE_FP16, 65504.0, 16.0}, {TBE_BF16, 0x1.fep127, 0x1p119},
             {TBE_FP32, 0x1.fffffep127, 0x1p103}};
  for (int k = 0; k < 3; k++) {
    const double M = dt[k].max, h = dt[k].half_ulp;
    /* {exact, bound, got sign, allowed}: reach = exact + bound */
    const struct {
      double e, b;
      int sign, ok;
    } c[] = {
        {M, h, +1, 1},            /* reaches the threshold exactly */
        {M, h / 2, +1, 0},        /* past M, short of the threshold */
        {M - h, h, +1, 0},        /* reaches M only */
        {M - h, 2 * h + h, +1, 1}, /* past the threshold */
        {-M, h, -1, 1},           /* the same below zero */
        {-M, h / 2, -1, 0},
        {-M, h, +1, 0},           /* the wrong sign never */
        {M, 3 * h, -1, 0},
    };
    enum { NC = sizeof c / sizeof c[0] };
    double exact[NC], bound[NC];
    static float got[NC];
    int want = 0;
    for (int i = 0; i < NC; i++) {
      exact[i] = c[i].e;
      bound[i] = c[i].b;
      fill(dt[k].t, got, i, c[i].sign * INFINITY);
      want += !c[i].ok;
    }
    cmp_result r;
    cmp_init(&r, CMP_BOUND, NC);
    cmp_bound(&r, dt[k].t, exact, bound, got, NC);
    CHECK(r.violations == want, "dtype %d: %lld overflow violations, expected %d", (int)dt[k].t,
          (long long)r.violations, want);
    for (int64_t v = 0; v < r.violations && v < r.cap; v++)
      CHECK(!c[r.first[v].index].ok, "dtype %d: an allowed Inf at %lld was flagged",
            (int)dt[k].t, (long long)r.first[v].index);
    cmp_free(&r);
  }
}

/* A NaN or infinite bound on a finite exact value passes anything (err > NaN is false): it
 * must fail instead, and be recorded with a storable bound (+Inf, not NaN). Where the exact
 * value is itself Inf or NaN, no bound applies: equal Infs and two NaNs pass. */
static void test_nonfinite_bounds(void)
{
  double exact[6] = {1.0, 2.0, 3.0, INFINITY, NAN, -INFINITY};
  double bound[6] = {NAN, INFINITY, 0.5, NAN, INFINITY, NAN};
  float g[6] = {7.0f, -9.0f, 3.25f, INFINITY, NAN, INFINITY};
  cmp_result r;
  cmp_init(&r, CMP_BOUND, 6);
  cmp_bound(&r, TBE_FP32, exact, bound, g, 6);
  CHECK(r.violations == 3 && r.no_bound == 2 && r.exact == 2,
        "non-finite bounds: %lld violations, %lld without a bound, %lld exact",
        (long long)r.violations, (long long)r.no_bound, (long long)r.exact);
  CHECK(r.violations == 3 && r.first[0].index == 0 && r.first[1].index == 1 &&
            r.first[2].index == 5,
        "non-finite bounds: the wrong elements fail");
  for (int i = 0; i < 3 && i < r.violations; i++)
    CHECK(r.first[i].bound >= 0, "violation %d has bound %g (the database needs a number)", i,
          r.first[i].bound);
  CHECK(isinf(r.worst_bound_ratio), "worst ratio %g without a bound", r.worst_bound_ratio);
  cmp_free(&r);
}

static void test_ulp_distance_and_ints(void)
{
  CHECK(cmp_ulp_distance(TBE_FP32, 0x00000000u, 0x80000000u) == 0, "+0/-0");
  CHECK(cmp_ulp_distance(TBE_FP32, 0x00000001u, 0x80000001u) == 2, "across zero");
  CHECK(cmp_ulp_distance(TBE_FP16, 0x3C00u, 0x3C02u) == 2, "fp16");
  CHECK(cmp_ulp_distance(TBE_BF16, 0xBF80u, 0xBF81u) == 1, "bf16 negative");
  int64_t x[5] = {0, 1, 2, 3, 4}, y[5] = {0, 1, 2, 3, 5};
  cmp_result r;
  cmp_init(&r, CMP_BITWISE, 0);
  cmp_bitwise_int(&r, TBE_I64, x, y, 5);
  CHECK(r.violations == 1 && r.exact == 4, "int compare");
  cmp_free(&r);
}

/* Every metric compares every element: a difference only at element `at` (the first, the last)
 * of n is one violation there, and all n elements count. */
static void test_ends(void)
{
  enum { n = 7 };
  for (int at = 0; at < n; at += n - 1) {
    float a[n] = {1, 2, 3, 4, 5, 6, 7}, b[n];
    memcpy(b, a, sizeof a);
    b[at] = 8;
    int64_t x[n] = {0, 1, 2, 3, 4, 5, 6}, y[n];
    memcpy(y, x, sizeof x);
    y[at] = -1;
    double exact[n], bound[n];
    for (int i = 0; i < n; i++) {
      exact[i] = a[i];
      bound[i] = 0.5;
    }
    cmp_result r[3];
    cmp_init(&r[0], CMP_BITWISE, 4);
    cmp_bitwise(&r[0], TBE_FP32, a, b, n);
    cmp_init(&r[1], CMP_BITWISE, 4);
    cmp_bitwise_int(&r[1], TBE_I64, x, y, n);
    cmp_init(&r[2], CMP_BOUND, 4);
    cmp_bound(&r[2], TBE_FP32, exact, bound, b, n);
    for (int m = 0; m < 3; m++) {
      CHECK(r[m].elements == n && r[m].violations == 1 && r[m].first[0].index == at,
            "metric %d, a difference at element %d of %d: %lld elements, %lld violations", m,
            at, n, (long long)r[m].elements, (long long)r[m].violations);
      cmp_free(&r[m]);
    }
  }
}

int main(void)
{
  test_ends();
  test_one_ulp();
  test_nan_inf();
  test_overflow_edge();
  test_nonfinite_bounds();
  test_ulp_distance_and_ints();
  return TEST_MAIN_RESULT();
}
