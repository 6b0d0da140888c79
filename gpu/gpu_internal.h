/* gpu_internal.h: what the files of gpu/ call in each other (bounds check halves, forward paths,
 * scratch buffers). Not public: the rest of tbecheck includes tbe_gpu.h only.
 */
#ifndef GPU_INTERNAL_H
#define GPU_INTERNAL_H

#include <cuda_runtime.h>

#include "dev_batch.cuh"
#include "tbe_gpu.h"

/* Reusable device scratch, one buffer per slot, grown on demand. */
struct gpu_scratch {
  void *ptr[4];
  size_t bytes[4];
};
tbe_status gpu_scratch_get(gpu_scratch *s, int slot, size_t bytes, void **p);
void gpu_scratch_free(gpu_scratch *s);

/* Judges the offsets and, outside FATAL, repairs them (prefix max); adds to d_state. */
tbe_status gpu_bounds_offsets(const dev_batch &b, dev_bounds *d_state, tbe_bounds_mode mode,
                              gpu_scratch *scratch, cudaStream_t stream);
/* Checks the indices of the (repaired) bags; repairs them outside FATAL. */
tbe_status gpu_bounds_indices(const dev_batch &b, dev_bounds *d_state, tbe_bounds_mode mode,
                              cudaStream_t stream);

/* TBE_EINVAL, naming the field, unless cfg (NULL: the policy) holds values the kernels have:
 * bags 0, 1, 2 or 4 (at most the 4 lanes of the narrowest group), width 0, 4 or 8, small
 * auto, on or off. */
tbe_status gpu_forward_check_config(const gpu_fwd_config *cfg);

/* FATAL's first offender as the GPU names it (TBE_SEMANTICS.md 2): kind 0 none, 1 an offset
 * (bag total_B: the last offset), 2 an index. */
struct dev_offender {
  long long kind, feature, bag, position, value;
};
/* Writes *d_offender from d_state's first bad bag or position (after the check and forward). */
tbe_status gpu_bounds_offender(const dev_batch &b, const dev_bounds *d_state,
                               dev_offender *d_offender, cudaStream_t stream);

/* The generic gather forward over the features in `features` (host array of n ids). With
 * fused != 0 the kernels check and repair indices (mode) and count into d_state; in FATAL
 * they skip all work once d_state names an offender. */
tbe_status gpu_forward_gather(const dev_batch &b, const int32_t *features, int n,
                              const gpu_fwd_config *cfg, int fused, tbe_bounds_mode mode,
                              dev_bounds *d_state, gpu_scratch *scratch, cudaStream_t stream);

/* A feature on the small-table path (host-side description). */
struct small_feature {
  int64_t bag0, Bt, table, E, col0;
  int32_t D;
};

/* The small-table tensor-core forward over the n features (each eligible: ref_small_eligible);
 * fused, mode and d_state as for gpu_forward_gather. */
tbe_status gpu_forward_small(const dev_batch &b, const small_feature *f, int n, int fused,
                             tbe_bounds_mode mode, dev_bounds *d_state, cudaStream_t stream);

#endif
