/* error_bound.c: gamma(k) and the one-rounding store error behind every derived bound.
 * Not a place for per-algorithm bounds: those sit beside their algorithm (forward_exact.c).
 */
#include "error_bound.h"

#include <math.h>

double ref_gamma(int64_t k, double u)
{
  double ku = (double)k * u;
  return ku < 1.0 ? ku / (1.0 - ku) : INFINITY;
}

double ref_store_error(tbe_dtype t, double mag)
{
  /* A value y with |y| <= mag lies in a binade no higher than mag's, [2^k, 2^(k+1)), where the
   * spacing is 2^(k+1) * u: its rounding moves it by at most 2^k * u, or by half the subnormal
   * spacing below the normal range. Tighter than u * mag by up to 2x: a second rounding (to
   * fp32 first) can leave it, which is how a double rounding is found. */
  double u = 0x1p-24, sub = 0x1p-150;
  if (t == TBE_FP16) {
    u = 0x1p-11;
    sub = 0x1p-25;
  } else if (t == TBE_BF16) {
    u = 0x1p-8;
    sub = 0x1p-134;
  }
  if (!(mag < INFINITY))
    return INFINITY;
  int k;
  frexp(mag, &k); /* mag = f * 2^k, 0.5 <= f < 1: its binade starts at 2^(k-1) */
  double half_ulp = ldexp(u, k - 1);
  return half_ulp > sub ? half_ulp : sub;
}
