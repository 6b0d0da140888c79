/* gpu_internal.h: what the files of gpu/ call in each other (bounds check halves, forward paths,
 * scratch buffers). Not public: the rest of tbecheck includes tbe_gpu.h only.
 */
#ifndef GPU_INTERNAL_H
#define GPU_INTERNAL_H

#include <cuda_runtime.h>

#include <vector>

#include "cuda_check.h"
#include "dev_batch.cuh"
#include "tbe_gpu.h"

/* Returns the status of expr from the calling function when it is not TBE_OK (GPU_TRY, in
 * cuda_check.h, is the one macro for CUDA's own errors). */
#define STATUS_TRY(expr)                                                                 \
  do {                                                                                   \
    tbe_status status_try_st_ = (expr);                                                  \
    if (status_try_st_.code != TBE_OK)                                                   \
      return status_try_st_;                                                             \
  } while (0)

/* The device's multiprocessors (132 if it cannot be asked): grids are sized from it. */
int gpu_sm_count();
int64_t gpu_l2_bytes(); /* the device's L2 cache */

/* Device allocations of one run, freed together. */
struct dev_arena {
  std::vector<void *> ptrs;
  ~dev_arena()
  {
    for (void *p : ptrs)
      cudaFree(p);
  }
  tbe_status alloc(size_t bytes, void **p)
  {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess)
      return tbe_error(TBE_ENOMEM, "gpu", -1, "cudaMalloc of %zu bytes failed: %s", bytes,
                       cudaGetErrorString(e));
    ptrs.push_back(*p);
    return tbe_ok();
  }
  tbe_status upload(const void *h, size_t bytes, void **p)
  {
    tbe_status st = alloc(bytes, p);
    if (st.code == TBE_OK && bytes)
      GPU_TRY(cudaMemcpy(*p, h, bytes, cudaMemcpyHostToDevice));
    return st;
  }
};

/* Reusable device scratch, one buffer per slot, grown on demand. */
struct gpu_scratch {
  void *ptr[4];
  size_t bytes[4];
};
tbe_status gpu_scratch_get(gpu_scratch *s, int slot, size_t bytes, void **p);
void gpu_scratch_free(gpu_scratch *s);

/* Judges the offsets and, outside FATAL, repairs them (prefix max); adds to d_state, whose
 * first_bad_bag must be ~0 on entry (the repair runs only when the check sets it). */
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

/* The generic gather forward's launches for the features in `features` (host array of n ids)
 * under cfg, planned once from the host batch (it uploads the features' descriptions). */
struct gpu_fwd_plan;
tbe_status gpu_fwd_plan_make(const tbe_batch *h, const tbe_layout *l, const int32_t *features,
                             int n, const gpu_fwd_config *cfg, gpu_fwd_plan **out);
void gpu_fwd_plan_free(gpu_fwd_plan *p);

/* Enqueues the generic gather forward of plan p. With fused != 0 the kernels check and repair
 * indices (mode) and count into d_state; in FATAL they skip all work once d_state names an
 * offender. */
tbe_status gpu_forward_gather(const dev_batch &b, const gpu_fwd_plan *p, int fused,
                              tbe_bounds_mode mode, dev_bounds *d_state, cudaStream_t stream);

/* A feature on the small-table path (host-side description). */
struct small_feature {
  int64_t bag0, Bt, table, E, col0;
  int32_t D, t;
};

/* The small-table tensor-core forward over the n features (each eligible: ref_small_eligible);
 * fused, mode and d_state as for gpu_forward_gather. With counts (bwd.small_tc), feature t's
 * bags also store their fp16 counts (the A operand, REF_SMALL_MAX_E per bag) from row
 * counts_base[t] on (host array; -1: not saved). */
tbe_status gpu_forward_small(const dev_batch &b, const small_feature *f, int n, int fused,
                             tbe_bounds_mode mode, dev_bounds *d_state, uint16_t *counts,
                             const int64_t *counts_base, cudaStream_t stream);

/* The noise kernel of bwd.noise=1 (noise.cu): its stream and scratch, made on first launch. */
struct gpu_noise {
  cudaStream_t stream = nullptr;
  unsigned *buf = nullptr;
  dev_arena arena;
};
/* Launches the noise kernel on n's own non-blocking stream; it ends by itself (noise.cu). */
tbe_status gpu_noise_launch(gpu_noise *n);
/* Waits for the noise kernel, then destroys its stream (the arena frees the buffer). */
void gpu_noise_free(gpu_noise *n);

/* The backward of a session (backward.cu). */
struct gpu_bwd;
tbe_status gpu_bwd_open(const tbe_batch *h, const tbe_layout *l, const dev_batch &b,
                        const ref_bwd_config *cfg, const gpu_bwd_config *gc,
                        const void *grad_output, const float *momentum, gpu_bwd **out);
void gpu_bwd_close(gpu_bwd *g);
/* Replaces the backward's gpu_bwd_config (gpu_session_backward_config's contract). */
tbe_status gpu_bwd_configure(gpu_bwd *g, const gpu_bwd_config *gc);
/* Launches the noise kernel when the configuration asks for it (bwd.noise=1), else nothing. */
tbe_status gpu_bwd_noise(gpu_bwd *g);
/* Copies the pristine weights and momentum into the working ones. */
tbe_status gpu_bwd_restore(gpu_bwd *g, cudaStream_t stream);
/* New host inputs of the same shape in place of the pristine ones. */
tbe_status gpu_bwd_upload(gpu_bwd *g, const tbe_batch *h, const tbe_layout *l,
                          const void *grad_output, const float *momentum);
/* Whether the backward takes its metadata from the forward (bwd.hoist=on, the current
 * configuration's). */
int gpu_bwd_hoist(const gpu_bwd *g);
/* bwd.small_tc: whether the metadata is left out (gpu_bwd_small_plan), as of the last plan and
 * the uploads since (an upload that would send a table back makes it 0). */
int gpu_bwd_small_all(const gpu_bwd *g);
/* bwd.small_tc: the device buffer the forward saves its counts into and *base, their rows per
 * feature (gpu_forward_small), or NULL when the configuration has it off. */
uint16_t *gpu_bwd_small_counts(const gpu_bwd *g, const int64_t **base);
/* bwd.small_tc: the tables the path takes after a forward whose small-table features are
 * small[t] (ref_small_tc_tables); uploads them on stream, behind what reads the plan before,
 * only when they changed (so never in a capture, which repeats the plain call before it).
 * With mode NONE (no repair: the host's offsets are the call's) and every table taken by the
 * rule on the host's inputs, the metadata is not made: no position is left for the generic
 * tiers. Nothing when the configuration has it off. */
tbe_status gpu_bwd_small_plan(gpu_bwd *g, const unsigned char *small, tbe_bounds_mode mode,
                              cudaStream_t stream);
/* Enqueues the backward's metadata (counts, transpose, classification) on the forward's stream,
 * between two events of its own (gpu_bwd_stats.hoist_ms). The caller puts it after the
 * forward's kernels (the fused bounds check repairs indices inside them) and keeps the record
 * of which batch it belongs to (engine.cu); fatal_state as for gpu_bwd_enqueue. */
tbe_status gpu_bwd_hoisted_metadata(gpu_bwd *g, const dev_bounds *fatal_state,
                                    cudaStream_t stream);
/* Enqueues the backward, after an untimed fill of the deterministic partial slots with NaN and
 * a reset of the steal counters; fatal_state (FATAL mode, else NULL) stops it when an offender
 * was found; timed records the phase events; hoisted: the metadata is the one
 * gpu_bwd_hoisted_metadata enqueued for these inputs, so it is not made again (the caller
 * vouches for it). Each call counts one launch (dev_bwd.launch, bwd.delay's hash). */
tbe_status gpu_bwd_enqueue(gpu_bwd *g, const dev_bounds *fatal_state, int timed, int hoisted,
                           cudaStream_t stream);
/* The last enqueue's times and counts (waits for it). */
tbe_status gpu_bwd_stats_get(gpu_bwd *g, gpu_bwd_stats *st);
/* The last enqueue's results, copied back. */
tbe_status gpu_bwd_results(gpu_bwd *g, const tbe_batch *h, gpu_bwd_result *r);

#endif
