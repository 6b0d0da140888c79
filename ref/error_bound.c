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
  switch (t) {
  case TBE_FP16: return 0x1p-11 * mag + 0x1p-25;
  case TBE_BF16: return 0x1p-8 * mag + 0x1p-134;
  case TBE_FP32: break;
  }
  return 0x1p-24 * mag + 0x1p-150;
}
