/* gather_ceiling.h: the practical ceiling of a TBE forward on this GPU: a plain gather kernel
 * with no options, timed beside ours in every benchmark run. Not part of tbecheck's engine.
 */
#ifndef BENCH_GATHER_CEILING_H
#define BENCH_GATHER_CEILING_H

#include "tbe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Times the plain kernel on b (FP16 weights, FP32 output, SUM, unweighted, fixed B, every D a
 * multiple of 8): median of reps after warm-up, in *ms. Its output is copied to out (fp32,
 * l->out_elems) so the caller can check it against the reference. */
tbe_status gather_ceiling_run(const tbe_batch *b, const tbe_layout *l, int reps, float *ms,
                              float *out);

#ifdef __cplusplus
}
#endif

#endif
