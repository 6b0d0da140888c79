/* run_config.h: how an engine runs a batch without changing what it computes: the GPU
 * forward's and backward's configurations (case keys fwd.*, fused_bounds, bwd.long, bwd.bucket,
 * bwd.direct, bwd.width and the schedule). Plain C, no numerics: the knobs that change bits
 * (threshold, chunk, combine) are ref_bwd_config's (backward.h).
 *
 * One type per concern: the case language parses these keys straight into these structs
 * (tbe_knobs embeds them), and gpu/ reads them; nothing copies them field by field between.
 */
#ifndef TBE_RUN_CONFIG_H
#define TBE_RUN_CONFIG_H

#ifdef __cplusplus
extern "C" {
#endif

/* How the forward runs (case keys fwd.bags, fwd.width, fwd.small, fwd.gather, fused_bounds). Zero values
 * mean the default policy. None of these changes the generic path's bits. */
typedef enum { GPU_SMALL_AUTO = 0, GPU_SMALL_ON = 1, GPU_SMALL_OFF = 2 } gpu_small_mode;
/* the generic gather's kernel (fwd.gather): each lane loads the indices it needs itself
 * (direct), or a group reads a window of indices once and passes the rows' addresses around
 * (window), or the window's lean form (lean: 32-bit positions, no zero-row padding, more blocks
 * per SM; buckets of one 16-byte chunk per lane, the window elsewhere) */
typedef enum {
  GPU_GATHER_AUTO = 0,
  GPU_GATHER_DIRECT = 1,
  GPU_GATHER_WINDOW = 2,
  GPU_GATHER_LEAN = 3
} gpu_gather_mode;
typedef struct {
  int bags;             /* bags per program: 0 (policy), 1, 2 or 4 (the window gather's) */
  int width;            /* gather width, rows in flight: 0 (policy), 4 or 8 */
  int fused_bounds;     /* 1: indices are checked and repaired inside the forward kernels */
  gpu_small_mode small; /* small-table tensor-core path for eligible features */
  gpu_gather_mode gather; /* the generic gather's kernel */
} gpu_fwd_config;

/* How the backward runs (case keys bwd.long, bwd.bucket, bwd.direct, bwd.width, bwd.grid,
 * bwd.order, bwd.noise, bwd.delay, bwd.short_block, bwd.steal, bwd.bulk, bwd.hoist,
 * bwd.small_tc); the numerics-changing knobs (threshold, chunk, combine) are ref_bwd_config's.
 * Zero values mean the defaults. No bit of a deterministic result depends on these but
 * small_tc, which moves the tables it takes to the tensor-core order (ref/backward_small.h),
 * held to its model: grid, order, noise, delay, short_block and steal only change the schedule
 * (which group runs which run or chunk program, and when), which is what `tbecheck race`
 * varies; hoist only moves the metadata's kernels into the forward; bulk changes how the atomic
 * combine adds, whose order was never fixed. */
typedef enum { GPU_LONG_ACCUM = 0, GPU_LONG_FUSED = 1 } gpu_long_mode;
typedef enum { GPU_ORDER_ASC = 0, GPU_ORDER_DESC = 1, GPU_ORDER_SHUFFLE = 2 } gpu_chunk_order;
typedef enum { GPU_BULK_AUTO = 0, GPU_BULK_ON = 1, GPU_BULK_OFF = 2 } gpu_bulk_mode;
#define GPU_MAX_GRID 65535 /* the most blocks bwd.grid may ask of the chunk kernel */
#define GPU_MAX_DELAY 100000 /* the longest bwd.delay, ns */
#define GPU_MAX_SHORT_BLOCK 32 /* the longest block of bwd.short_block, steps */
typedef struct {
  gpu_long_mode long_mode; /* long runs: accum + apply (default: faster on the published
                              workload and the hot row, bench/RESULTS.md), or fused fence +
                              countdown */
  int no_bucket;           /* 1: every short run in the widest table's bucket (bwd.bucket=0) */
  int no_direct;           /* 1: the short tier reads the classification's run lists even where
                              it could read the runs where the encode left them (bwd.direct=0;
                              direct needs one width for every table, laid out back to back) */
  int short_width;         /* entries in flight per group on short runs: 0 (policy: 2), 2 or 4 */
  int long_width;          /* the same for the chunks of long runs (policy: 2) */
  int grid;                /* blocks of the long runs' chunk kernel: 0 (policy: one group per
                              chunk program, capped at gpu_bwd_max_blocks), or 1..GPU_MAX_GRID:
                              fewer blocks make each group loop over several chunk programs;
                              with steal, the blocks of every stealing kernel; also the
                              short tier's (0: the blocks the device keeps resident) */
  gpu_chunk_order order;   /* which chunk program the i-th group slot takes: ascending, descending,
                              or a fixed pseudo-random permutation keyed by the case seed */
  int noise;               /* 1: a noise kernel (noise.cu) runs on a second stream beside the
                              backward, for a bounded time, on its own scratch buffer */
  int delay;               /* 0..GPU_MAX_DELAY ns: each chunk program sleeps a pseudo-random
                              time below it (a hash of the program, the case seed and the
                              launch) between summing its part and publishing the partial, so a
                              countdown or read that overtakes a partial's store is seen (the
                              deterministic workspace starts each launch as NaN); 0: none */
  int short_block;         /* K (bwd.short_block=K: 1, 2, 4, .., GPU_MAX_SHORT_BLOCK): the short
                              tier on the grid of the blocks the device keeps resident (or
                              grid), each warp taking blocks of K steps of adjacent runs in turn
                              (with K = 1, the grid-stride loop's map); 0 (default): the
                              grid-stride loop on that grid; not with steal */
  int steal;               /* 1 (bwd.steal=on): persistent work stealing in the short and long
                              tiers: a grid of the blocks the device keeps resident (or grid),
                              whose groups take the next batch of runs or chunk programs from a
                              device counter, in place of the grid-stride loops; 0 (default,
                              measured faster on F4, PUB and MIX): the grid-stride loops */
  gpu_bulk_mode bulk;      /* ON (bwd.bulk=on; atomic combine only): a chunk program adds its
                              partial to its run's fp64 row with one bulk reduce
                              (cp.reduce.async.bulk .add.f64) from shared memory in place of
                              one atomicAdd per element: the same fp64 additions, each atomic,
                              in some order (ref/SEMANTICS.md's atomic bound holds either way);
                              OFF: an atomicAdd per element; AUTO (default): ON with the atomic
                              combine (it was never slower on the H200: bench/RESULTS.md), OFF
                              with the deterministic one */
  int hoist;               /* 1 (bwd.hoist=on): the backward's metadata (keys, sort, run-length
                              encode, scan, classification) runs at the end of every forward of
                              the session, on its stream, and the backward takes it from there,
                              refusing metadata of another batch (gpu_session_backward); 0
                              (default): the backward makes its own. Not a schedule knob: the
                              same kernels on the same inputs, only enqueued earlier */
  int small_tc;            /* 1 (bwd.small_tc=on; row-wise Adagrad only): the tables whose every
                              feature ran on the small forward path take the tensor-core
                              backward (counts^T x G, gpu/backward_small.cu) on the counts that
                              forward saved, refused when they belong to another batch; a table
                              whose call has a bag with L > 256 or an fp16-overflowing or NaN
                              G falls back to the generic backward, decided on the device. Not
                              the normative order: reported per feature, held to
                              ref/backward_small.h's model and bound. 0 (default, pending its
                              measurement on the H200): every table the generic backward */
} gpu_bwd_config;

#ifdef __cplusplus
}
#endif

#endif
