/* detmath.c: deterministic log/exp family from + - * / (detmath.h). Not libm: no table lookups,
 * no platform-dependent shortcuts; the same operation sequence runs everywhere.
 *
 * log: x = m * 2^k with m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s), s = (m-1)/(m+1), whose odd
 * series in s (|s| < 0.172) is summed to s^25 (next term below 2^-60 relative). exp: x = k ln2 + r
 * with |r| <= ln2/2 (ln2 split in hi + lo so k*hi is exact), e^r by its Taylor series to r^14,
 * then scaled by 2^k through the exponent bits. log1p and expm1 avoid cancellation near 0.
 */
#include "bits.h"
#include "detmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ln2 = LN2_HI + LN2_LO, LN2_HI with 32 significant bits so k * LN2_HI is exact for |k| < 2^21 */
#define LN2_HI 6.93147180369123816490e-01
#define LN2_LO 1.90821492927058770002e-10
#define INV_LN2 1.44269504088896338700e+00
#define SQRT2 1.41421356237309504880

/* 2^k for -1022 <= k <= 1023, exact */
static double pow2i(int k) { return ref_bits_f64((uint64_t)(k + 1023) << 52); }

double det_log(double x)
{
  if (x != x || x < 0)
    return NAN;
  if (x == 0)
    return -INFINITY;
  if (x == INFINITY)
    return x;
  int k = 0;
  if (x < 0x1p-1022) { /* subnormal: scale into the normal range */
    x *= 0x1p54;
    k = -54;
  }
  uint64_t u = ref_f64_bits(x);
  k += (int)(u >> 52) - 1023;
  double m = ref_bits_f64((u & UINT64_C(0xFFFFFFFFFFFFF)) | (UINT64_C(1023) << 52)); /* [1, 2) */
  if (m > SQRT2) {
    m *= 0.5;
    k++;
  }
  double s = (m - 1.0) / (m + 1.0); /* m - 1 is exact (Sterbenz) */
  double s2 = s * s;
  double p = 1.0 / 25;
  for (int n = 23; n >= 3; n -= 2)
    p = 1.0 / n + s2 * p;
  double log_m = 2.0 * s + 2.0 * s * (s2 * p);
  double kd = (double)k;
  return kd * LN2_HI + (log_m + kd * LN2_LO);
}

double det_log1p(double x)
{
  double u = 1.0 + x;
  if (u == 1.0)
    return x;
  if (u <= 0)
    return det_log(u);
  /* log(u) * x / (u - 1) cancels the rounding of 1 + x (Goldberg) */
  return det_log(u) * (x / (u - 1.0));
}

/* e^r for |r| <= ln2/2 + a little, Taylor to r^14 (remainder below 2^-57 relative) */
static double exp_reduced(double r)
{
  double p = 1.0;
  for (int n = 14; n >= 1; n--)
    p = 1.0 + r * p / n;
  return p;
}

double det_exp(double x)
{
  if (x != x)
    return x;
  if (x > 709.8)
    return INFINITY;
  if (x < -745.2)
    return 0.0;
  double t = x * INV_LN2;
  double kd = (double)(int64_t)(t < 0 ? t - 0.5 : t + 0.5);
  double r = (x - kd * LN2_HI) - kd * LN2_LO;
  double e = exp_reduced(r);
  int k = (int)kd;
  if (k > 1023) /* e^r * 2^1024 without overflowing the scale factor */
    return e * pow2i(k - 1) * 2.0;
  if (k < -1022) /* subnormal result: scale in two steps, rounding once at the end */
    return e * pow2i(k + 54) * 0x1p-54;
  return e * pow2i(k);
}

double det_expm1(double x)
{
  if (x > -0.5 && x < 0.5) {
    /* x (1 + x/2 (1 + x/3 (1 + ...))), to x^20 / 20! */
    double p = 1.0;
    for (int n = 20; n >= 2; n--)
      p = 1.0 + x * p / n;
    return x * p;
  }
  return det_exp(x) - 1.0;
}
