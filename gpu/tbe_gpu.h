/* tbe_gpu.h: the only header the rest of tbecheck includes from gpu/: the CUDA engine's entry
 * points. Not a place for kernels or CUDA types; everything here is plain C.
 */
#ifndef TBE_GPU_H
#define TBE_GPU_H

#include <stddef.h>

#include "tbe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Finds a usable CUDA device. On success writes "name (sm_XY, N MiB)" into desc; returns
 * TBE_ENODEV with the reason in the message when there is none (no driver, no device, or a
 * build without CUDA). */
tbe_status gpu_probe(char *desc, size_t n);

/* How the forward runs (case keys fwd.bags, fwd.width, fwd.small, fused_bounds). Zero values
 * mean the default policy. None of these changes the generic path's bits. */
typedef enum { GPU_SMALL_AUTO = 0, GPU_SMALL_ON = 1, GPU_SMALL_OFF = 2 } gpu_small_mode;
typedef struct {
  int bags;             /* bags per program: 0 (policy), 1, 2 or 4 */
  int width;            /* gather width, rows in flight: 0 (policy), 4 or 8 */
  int fused_bounds;     /* 1: indices are checked and repaired inside the forward kernels */
  gpu_small_mode small; /* small-table tensor-core path for eligible features */
} gpu_fwd_config;

/* What one GPU forward produced, copied back to the host (malloc'd; gpu_fwd_result_free). */
typedef struct {
  void *out;           /* [out_elems] in the output dtype (16-bit types as bits) */
  void *indices;       /* [N] after the bounds check, in the index dtype */
  void *offsets;       /* [total_B + 1] after the bounds check */
  int64_t warnings;    /* the bounds-check counter */
  tbe_status bounds;   /* TBE_EBOUNDS with the first offender in FATAL mode, else ok */
  double ms;           /* bounds check + forward, CUDA events */
  int small_features;  /* features that took the small-table path */
  int guard_errors;    /* elements written outside the output (guard regions) */
} gpu_fwd_result;

/* Uploads the batch, runs the bounds check (mode) and the forward (cfg), and copies the results
 * back. The output is poisoned (NaN pattern) before the run, so unwritten elements show up.
 * Returns TBE_ENODEV without a GPU; a FATAL bounds failure is reported in r->bounds, not as the
 * return value. */
tbe_status gpu_run_forward(const tbe_batch *b, const tbe_layout *l, tbe_bounds_mode mode,
                           const gpu_fwd_config *cfg, gpu_fwd_result *r);
void gpu_fwd_result_free(gpu_fwd_result *r);

#ifdef __cplusplus
}
#endif

#endif
