/* detmath_test.c: accuracy of the deterministic log/exp family against libm, and its special
 * values. Not a test of libm: libm is only the yardstick here, never the generator's input.
 */
#include <math.h>
#include <stdint.h>

#include "detmath.h"
#include "prng.h"
#include "test_util.h"

/* relative error, with an absolute floor for results near zero */
static double rel_err(double got, double want)
{
  double d = fabs(got - want);
  return d / (fabs(want) > 1e-300 ? fabs(want) : 1e-300);
}

int main(void)
{
  const double tol = 1e-14;
  double worst[4] = {0, 0, 0, 0};
  uint64_t key = prng_key(42, 1);
  for (uint64_t i = 0; i < 200000; i++) {
    uint64_t x = prng_at(key, i);
    /* log: positive values over the whole exponent range, subnormals included */
    double pos = ldexp(1.0 + prng_unit(x), (int)(x % 2100) - 1074);
    double e;
    if ((e = rel_err(det_log(pos), log(pos))) > worst[0])
      worst[0] = e;
    double near1 = 1.0 + (prng_unit(x) - 0.5) * ldexp(1.0, -(int)(x % 50));
    if ((e = fabs(det_log(near1) - log(near1))) > worst[0])
      worst[0] = e; /* absolute near 1, where log is tiny */
    double small = (prng_unit(x) * 2 - 1) * ldexp(1.0, -(int)(x % 60));
    if ((e = rel_err(det_log1p(small), log1p(small))) > worst[1])
      worst[1] = e;
    double arg = (prng_unit(x) * 2 - 1) * 740;
    if ((e = rel_err(det_exp(arg), exp(arg))) > worst[2] && exp(arg) > 0x1p-1022)
      worst[2] = e;
    if ((e = rel_err(det_expm1(small), expm1(small))) > worst[3])
      worst[3] = e;
    double mid = (prng_unit(x) * 2 - 1) * 30;
    if ((e = rel_err(det_expm1(mid), expm1(mid))) > worst[3])
      worst[3] = e;
  }
  const char *names[4] = {"log", "log1p", "exp", "expm1"};
  for (int k = 0; k < 4; k++)
    CHECK(worst[k] < tol, "%s: worst relative error %.3g", names[k], worst[k]);

  CHECK(det_log(1.0) == 0.0, "log(1) = %.17g", det_log(1.0));
  CHECK(det_log(0.0) == -INFINITY, "log(0)");
  CHECK(isnan(det_log(-1.0)), "log(-1)");
  CHECK(det_log(INFINITY) == INFINITY, "log(inf)");
  CHECK(det_exp(0.0) == 1.0, "exp(0)");
  CHECK(det_exp(1000.0) == INFINITY && det_exp(-1000.0) == 0.0, "exp overflow/underflow");
  CHECK(det_exp(-INFINITY) == 0.0 && det_exp(INFINITY) == INFINITY, "exp(+-inf)");
  CHECK(det_log1p(-1.0) == -INFINITY, "log1p(-1)");
  CHECK(det_expm1(0.0) == 0.0, "expm1(0)");
  /* subnormal results of exp stay close */
  CHECK(fabs(det_exp(-740.0) - exp(-740.0)) <= 0x1p-1074 * 2, "exp(-740)");
  return TEST_MAIN_RESULT();
}
