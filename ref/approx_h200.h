/* approx_h200.h: how far the H200's approximate fp32 instructions that Triton emits land from the
 * exact value, in ulps of the result, as measured by gpu/approx_test.cu (which fails if they move).
 *
 * sqrt.approx.ftz.f32 over every normal non-negative input (exhaustive); div.full.f32 over the
 * divisions a TBE makes (s / D for D = 1 to 2048, lr / x for the learning rates of cases/): the
 * worst distance between the result and the exact root or quotient. The Triton TBE model's
 * row-wise Adagrad bound (backward_order_triton.c) adds the half ulp its IEEE result may lie
 * from the exact value.
 */
#ifndef REF_APPROX_H200_H
#define REF_APPROX_H200_H

/* measured on the H200 (driver 580.159.04): sqrt 0.944 ulp over every normal input (exhaustive);
 * div.full 2.074 ulp for s / D over every 4th numerator mantissa, 1.888 for lr / x. The division
 * is sampled, not exhaustive: its constant keeps a margin over what was measured */
#define REF_H200_SQRT_APPROX_ULP 1.0 /* sqrt.approx.ftz.f32 */
#define REF_H200_DIV_FULL_ULP 3.0    /* div.full.f32 */

#endif
