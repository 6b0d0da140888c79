/* detmath.h: log, exp, log1p and expm1 built from IEEE + - * / only, so the generator's draws are
 * the same bits on every machine. Not a fast or general libm: used where bytes depend on it.
 *
 * Each function is a fixed sequence of correctly rounded double operations (the project builds
 * with -ffp-contract=off, so none is fused), accurate to a few ulp (relative error below 1e-15).
 * Special values: det_log(0) = -inf, det_log(x < 0) = NaN, det_exp(+inf) = inf, det_exp(-inf) = 0.
 */
#ifndef HARNESS_DETMATH_H
#define HARNESS_DETMATH_H

double det_log(double x);
double det_log1p(double x);
double det_exp(double x);
double det_expm1(double x);

#endif
