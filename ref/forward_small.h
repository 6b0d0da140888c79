/* forward_small.h: the small-table tensor-core path on the CPU: which features may take it, and
 * a model of the hardware's order (TBE_SEMANTICS.md 3, 6). Not the normative forward (forward.h):
 * this path is held to the exact sum within a bound; the model only predicts its bits.
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

/* The tensor-core model for the features with mask[t] != 0 (others untouched in out, FP32):
 * per bag, counts c_r of the first 256 positions (skipping -1); per column, from C = +0, for
 * each chunk of 16 rows in order C = RZ_fp32(C + exact(sum of c_r * W[r][d])); then the rest of
 * the positions one at a time in fp32 round-to-nearest; then MEAN's fp32 scaling. This model
 * matched mma.sync on an H200 in an outside measurement; tbecheck reports how often it does. */
tbe_status ref_forward_small_model(const tbe_batch *b, const tbe_layout *l,
                                   const unsigned char *mask, float *out);

#ifdef __cplusplus
}
#endif

#endif
