/* forward_small.h: the small-table tensor-core path on the CPU: which features may take it, and
 * a bit-accurate model of the hardware (TBE_SEMANTICS.md 3, 6). Not the normative forward
 * (forward.h): this path is held to the model bit for bit and to the exact sum within a bound.
 */
#ifndef REF_FORWARD_SMALL_H
#define REF_FORWARD_SMALL_H

#include "tbe.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REF_SMALL_MAX_E 64     /* rows of an eligible table */
#define REF_SMALL_HIST 256     /* positions per bag that go through the histogram */
#define REF_SMALL_K 16         /* rows per tensor-core K chunk */

/* May feature t take the small-table path? FP16 weights, FP32 output, SUM or MEAN, unweighted,
 * no VBE, E <= 64, 64 <= D <= 128 with D a multiple of 8. (Which eligible features take it is
 * the GPU's policy (gpu/engine.cu), reported in gpu_fwd_result.small_mask; nothing here or in
 * the harness recomputes that choice.) */
int ref_small_eligible(const tbe_batch *b, int32_t t);

/* The tensor-core model: one output element of mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
 * on the H200 (sm_90), d = sum_k a[k] * b[k] + c with fp16 a, b and fp32 c, d. Fitted bit for
 * bit to 1,024,000 measured dot products (13 input families) and pinned on the GPU by
 * gpu/forward_small_probe_test.cu. One fused step, no intermediate normalisation:
 *  - the 16 products are exact; a product's exponent is ea + eb (the inputs' unbiased
 *    exponents, -14 for a subnormal fp16), whatever its significand in [0, 4);
 *  - emax is the largest exponent among the nonzero products and c (c's is -126 when subnormal);
 *  - every term, c included, is truncated toward zero to a multiple of 2^(emax -
 *    REF_MMA_ALIGN_BITS) (2 bits below fp32's 24 at emax), the truncated terms are summed
 *    exactly (no carry is lost), and the sum is rounded toward zero into fp32;
 *  - fp16 subnormal inputs count at their value (measured); a subnormal c is kept; a zero sum
 *    is +0, even when every term is -0 (not IEEE's rule: measured by the probe test);
 *  - any NaN input, Inf * 0, or Infs of both signs give the NaN 0x7fffffff; other Infs pass. */
#define REF_MMA_ALIGN_BITS 25
float ref_mma_f16_f32(const uint16_t a[REF_SMALL_K], const uint16_t b[REF_SMALL_K], float c);

/* The small-table path's model for the features with mask[t] != 0 (others untouched in out,
 * FP32): per bag, counts c_r of the first 256 positions (skipping -1); per column, from C = +0,
 * for each chunk of 16 rows in order C = ref_mma_f16_f32(counts, rows, C); then the rest of the
 * positions one at a time in fp32 round-to-nearest; then MEAN's fp32 scaling. */
tbe_status ref_forward_small_model(const tbe_batch *b, const tbe_layout *l,
                                   const unsigned char *mask, float *out);

#ifdef __cplusplus
}
#endif

#endif
