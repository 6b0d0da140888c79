/* tbe_gpu.h: the only header the rest of tbecheck includes from gpu/: the CUDA engine's entry
 * points. Not a place for kernels or CUDA types; everything here is plain C.
 */
#ifndef TBE_GPU_H
#define TBE_GPU_H

#include <stddef.h>

#include "backward.h"
#include "run_config.h"
#include "tbe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Finds a usable CUDA device. On success writes "name (sm_XY, N MiB)" into desc; returns
 * TBE_ENODEV with the reason in the message when there is none (no driver, no device, or a
 * build without CUDA). */
tbe_status gpu_probe(char *desc, size_t n);

/* What one GPU forward produced, copied back to the host (malloc'd; gpu_fwd_result_free). */
typedef struct {
  void *out;           /* [out_elems] in the output dtype (16-bit types as bits) */
  void *indices;       /* [N] after the bounds check, in the index dtype */
  void *offsets;       /* [total_B + 1] after the bounds check */
  int64_t warnings;    /* the bounds-check counter */
  tbe_status bounds;   /* TBE_EBOUNDS with the first offender in FATAL mode, else ok */
  double ms;           /* bounds check + forward, CUDA events */
  int small_features;  /* features that took the small-table path */
  unsigned char *small_mask; /* [T]: 1 where feature t took it (the GPU's choice: its columns
                              * follow the tensor-core order, held to the model and the bound) */
  int guard_errors;    /* elements written outside the output (guard regions) */
  int64_t rerun_diffs; /* gpu_run: elements (of out, indices, offsets, and the counter
                        * and offender) that differ in a second run over another poison: an
                        * unwritten element, or a nondeterministic one; 0 from sessions */
} gpu_fwd_result;

/* Uploads the batch, runs the bounds check (mode) and the forward (cfg), and copies the results
 * back. The output is poisoned (NaN pattern) before the run, so unwritten elements show up; the
 * forward then runs again over a finite poison, and r->rerun_diffs counts what differs.
 * A FATAL offender is named by the GPU itself (feature, bag, position, value in r->bounds).
 * Returns TBE_ENODEV without a GPU, TBE_EINVAL naming the field when cfg holds a value outside
 * its list above; a FATAL bounds failure is reported in r->bounds, not as the return value. */
tbe_status gpu_run_forward(const tbe_batch *b, const tbe_layout *l, tbe_bounds_mode mode,
                           const gpu_fwd_config *cfg, gpu_fwd_result *r);
void gpu_fwd_result_free(gpu_fwd_result *r);

/* A batch kept on the GPU for repeated forwards (benchmarks): inputs are uploaded once, and each
 * gpu_session_forward first restores the pristine indices and offsets (untimed), so a repairing
 * bounds check sees the same input every time. */
typedef struct gpu_session gpu_session;
tbe_status gpu_session_open(const tbe_batch *b, const tbe_layout *l, gpu_session **out);
/* Runs the bounds check (mode) and, unless bounds_only, the forward; *ms is their time by CUDA
 * events. */
tbe_status gpu_session_forward(gpu_session *s, tbe_bounds_mode mode, const gpu_fwd_config *cfg,
                               int bounds_only, float *ms);
/* Copies the last forward's results back (r->ms is that forward's time). */
tbe_status gpu_session_results(gpu_session *s, gpu_fwd_result *r);
void gpu_session_close(gpu_session *s);

/* A backward's times (CUDA events) and what its runs looked like (read back after it). */
typedef struct {
  double ms;         /* the whole backward + optimizer */
  double sort_ms, classify_ms, psw_ms, short_ms, long_ms; /* its parts */
  int hoisted;       /* 1: its metadata ran in the forward (bwd.hoist=on): sort_ms and
                      * classify_ms are 0 and not in ms; hoist_ms is their time inside the
                      * forward's (gpu_session_forward's *ms holds it) */
  double hoist_ms;
  double small_ms;   /* bwd.small_tc's segments and row updates (the check before the keys is
                      * in sort_ms, or in the forward's with the hoist) */
  int64_t runs, long_runs, chunks; /* runs (with the sentinel run, if any), long ones, chunks */
  int small_tc_tables; /* tables bwd.small_tc took in this call */
} gpu_bwd_stats;

/* What one GPU backward produced, copied back (malloc'd; gpu_bwd_result_free). */
typedef struct {
  void *weights;     /* [table_offset[num_tables]] updated, in the weight dtype */
  float *momentum;   /* [sum of E] updated (row-wise Adagrad), else NULL */
  float *psw_grad;   /* [N] per-sample-weight gradients (weighted), else NULL */
  unsigned char *small_tc_mask; /* [T]: 1 where feature t's table took bwd.small_tc in this
                                 * call (its rows follow the tensor-core order, held to
                                 * ref/backward_small.h's model and bound) */
  gpu_bwd_stats stats;
} gpu_bwd_result;
void gpu_bwd_result_free(gpu_bwd_result *r);

/* Prepares the session for the backward: allocates its buffers from the batch's shape and
 * uploads grad_output ([out_elems] in the output dtype), the momentum ([sum of E], Adagrad) and
 * a pristine copy of the weights. From then on every gpu_session_forward starts from the
 * pristine weights and momentum, and gpu_session_backward updates them. */
tbe_status gpu_session_backward_open(gpu_session *s, const ref_bwd_config *cfg,
                                     const gpu_bwd_config *g, const void *grad_output,
                                     const float *momentum);
/* Replaces the open backward's gpu_bwd_config with g (NULL: the defaults) for the next
 * gpu_session_backward calls. TBE_EINVAL naming the field for a value outside its list above, or
 * for a no_bucket other than the one the backward was opened with (its buffers follow it). */
tbe_status gpu_session_backward_config(gpu_session *s, const gpu_bwd_config *g);
/* Runs the backward + optimizer on the last forward's bounds-checked inputs, without a host
 * sync until its end; *st (may be NULL) gets its times and run counts. A FATAL offender of the
 * last forward makes it a no-op.
 * bwd.hoist=on (gpu_bwd_config.hoist): every gpu_session_forward with such a backward open runs
 * the backward's metadata (keys, sort, run-length encode, scan, classification) right after its
 * own kernels, timed as part of the forward, and records the batch it belongs to: the session's
 * generation, a count that every gpu_session_upload and every forward bumps. The backward then
 * takes that metadata instead of making its own, and only when it belongs to the current
 * inputs: when the last forward ran without the hoist, or gpu_session_upload replaced the
 * inputs since, it refuses (TBE_EINVAL, field "hoist", naming which) and enqueues nothing.
 * bwd.small_tc=on (gpu_bwd_config.small_tc, row-wise Adagrad, opened with it): every forward
 * with such a backward open saves the small-table path's per-bag counts and records its
 * generation as the hoist does; the backward takes a table whose every feature ran on that
 * path through the tensor cores (ref/backward_small.h; gpu_bwd_result.small_tc_mask says
 * which), and refuses (TBE_EINVAL, field "small_tc") counts of another batch. Without a bounds
 * check (TBE_BOUNDS_NONE) and with every table on that path by the rule on the host's inputs,
 * the backward makes no metadata at all; gpu_session_replay refuses (field "small_tc") a graph
 * captured so once an upload sends a table back to the generic backward. */
tbe_status gpu_session_backward(gpu_session *s, gpu_bwd_stats *st);
/* Copies the last backward's results back. */
tbe_status gpu_session_backward_results(gpu_session *s, gpu_bwd_result *r);

/* Bounds check + forward (+ backward, when opened; never its noise kernel) captured once in a
 * CUDA graph, then replayed (with bwd.hoist=on at capture, the graph's forward holds the
 * backward's metadata and its backward takes it, so every replay makes both from its inputs):
 * gpu_session_upload puts new inputs of the same shape (indices, offsets, weights,
 * per-sample weights, grad_output, momentum) in place of the pristine ones, and
 * gpu_session_replay runs the graph; results come from gpu_session_results and
 * gpu_session_backward_results as after a normal call. */
tbe_status gpu_session_capture(gpu_session *s, tbe_bounds_mode mode, const gpu_fwd_config *cfg);
tbe_status gpu_session_upload(gpu_session *s, const tbe_batch *b, const void *grad_output,
                              const float *momentum);
tbe_status gpu_session_replay(gpu_session *s);

/* One call: upload, bounds check, forward and, with bcfg (else NULL), the backward; results
 * into *fr and *br (br may be NULL without bcfg); then the forward once more over another
 * poison, fr->rerun_diffs counting what differs. */
tbe_status gpu_run(const tbe_batch *b, const tbe_layout *l, tbe_bounds_mode mode,
                   const gpu_fwd_config *fcfg, const ref_bwd_config *bcfg,
                   const gpu_bwd_config *gcfg, const void *grad_output, const float *momentum,
                   gpu_fwd_result *fr, gpu_bwd_result *br);

/* Device-to-device cudaMemcpy of `bytes` (median of reps), in GB/s of bytes read + written:
 * the copy ceiling benchmarks quote beside their kernels. */
tbe_status gpu_copy_ceiling(size_t bytes, int reps, double *gbps);

#ifdef __cplusplus
}
#endif

#endif
