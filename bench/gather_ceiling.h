/* gather_ceiling.h: the practical ceiling of a TBE forward on this GPU: a plain gather kernel
 * with no policy and no checks, timed beside ours in every benchmark run. Not part of
 * tbecheck's engine.
 */
#ifndef BENCH_GATHER_CEILING_H
#define BENCH_GATHER_CEILING_H

#include "tbe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Times the plain kernel on b (SUM into FP32; FP16, BF16 or FP32 weights; weighted or not;
 * fixed B or VBE; one D for every feature, with D / 8, or D / 4 for FP32 weights, a power of two
 * up to 256) on b's own indices and offsets, read as `width` (TBE_I32 or TBE_I64; converted from
 * b's itype when it differs, the values unchanged): the median of reps after warm-up of each of
 * its two unroll depths, the faster one in *ms and its depth in *unroll. That depth's output is
 * copied to out (fp32, l->out_elems) so the caller can check it against the reference. Any
 * other batch: TBE_EINVAL saying what the kernel lacks. */
tbe_status gather_ceiling_run(const tbe_batch *b, const tbe_layout *l, tbe_itype width, int reps,
                              float *ms, int *unroll, float *out);

#ifdef __cplusplus
}
#endif

#endif
