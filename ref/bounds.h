/* bounds.h: the bounds check of TBE_SEMANTICS.md section 2 on the CPU: offsets repaired as a
 * prefix max, indices checked and repaired, the warning counter, FATAL's first offender.
 * Not a validation of the batch's structure (tbe_batch_validate does that).
 */
#ifndef REF_BOUNDS_H
#define REF_BOUNDS_H

#include "tbe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks and, in WARNING and IGNORE modes, repairs b->offsets and b->indices in place.
 * *warnings receives the counter (WARNING), 0 otherwise. FATAL repairs nothing and returns
 * TBE_EBOUNDS naming the first offender; NONE does nothing. The batch must be validated and l
 * its layout. Deterministic: the same inputs give the same outputs for any thread count. */
tbe_status ref_bounds_check(tbe_batch *b, const tbe_layout *l, tbe_bounds_mode mode,
                            int64_t *warnings);

/* The FATAL status for an offender found by any engine: bag `bag` (0..total_B, total_B meaning
 * the last offset) when bag >= 0, else the invalid index at `position`. b holds the inputs as
 * given (FATAL repairs nothing), so every engine names an offender in the same words. */
tbe_status ref_bounds_offender(const tbe_batch *b, const tbe_layout *l, int64_t bag,
                               int64_t position);

#ifdef __cplusplus
}
#endif

#endif
