/* backward_impl.cuh: what the GPU backward's files share: the device view of one backward call
 * (transpose, run lists, workspaces), the group configurations, and the gather that sums a
 * stretch of sorted entries. Twin of ref/backward_impl.h (the gather's: ref_bwd_sum_entries in
 * ref/backward_short.c); not public (tbe_gpu.h is).
 *
 * Accumulation order (ref/backward_impl.h): a contribution of entry k to column d is G[row][d],
 * G = grad_output widened to fp32, clamped to [-clip, clip] when clipping, times fp32
 * 1.0f/(float)L of the bag for MEAN; weighted: acc = fma(w_k, G, acc), else acc = acc + G. A
 * stretch of entries is summed from +0, one entry at a time in sorted order, per column.
 */
#ifndef GPU_BACKWARD_IMPL_CUH
#define GPU_BACKWARD_IMPL_CUH

#include "dev_batch.cuh"
#include "optimizer.cuh"

/* Short-run buckets: next_pow2(D) = 1, 2, ..., 2048 (bwd_shape says how each runs). */
const int BWD_BUCKETS = 12;

/* A run in a list: where its entries start, how many, its table and key. */
struct bwd_run {
  int32_t start, len, table, pad;
  uint64_t key;
};

/* A long run: the run, its first chunk program and chunks. */
struct bwd_long {
  bwd_run r;
  int32_t chunk0, chunks;
};

/* A chunk program: the long run (index into the long list) and the chunk within it. */
struct bwd_chunk {
  int32_t lrun, chunk;
};

/* policy (bwd.steal): a short batch (bwd_steal_range) holds at most BWD_SHORT_BATCH runs per
 * group of its warp: more spread the atomic (one per warp and batch, all warps on one counter)
 * over more runs, fewer keep the tail short; a short run is from a few hundred cycles to a few
 * us of work. */
const int BWD_SHORT_BATCH = 8;
/* policy (bwd.steal): and its runs start within one window of BWD_BATCH_ENTRIES sorted entries,
 * so it sums fewer than BWD_BATCH_ENTRIES + short_below gradient rows: twice the default
 * threshold, so a stretch of the longest short runs (a Zipf table's hot rows, which sort
 * together) is cut into batches of two or three runs, while runs of a few entries fill their
 * batches up to the run cap. */
const int32_t BWD_BATCH_ENTRIES = 512;

/* policy: the runs the short tier takes (bwd_is_short): those below the threshold, and past it
 * the runs of one chunk (threshold <= SL <= chunk) of at most BWD_ONE_CHUNK_SHORT entries. A run
 * of one chunk is summed from +0 in sorted order, and both combines start from its one partial,
 * so its gradient is the short tier's sum bit for bit; the short tier sums it faster than a chunk
 * program, measured at every SL of the sweep up to 256 (bench/RESULTS.md), and a run of at most
 * the default threshold keeps the tier's balance as the defaults do. Returns the length runs
 * below which are short. */
const int32_t BWD_ONE_CHUNK_SHORT = 256;
inline int32_t bwd_short_below(int32_t threshold, int32_t chunk)
{
  const int32_t one = (chunk < BWD_ONE_CHUNK_SHORT ? chunk : BWD_ONE_CHUNK_SHORT) + 1;
  return threshold > one ? threshold : one;
}

/* The transpose's keys kernel (transpose.cu) takes 32 consecutive bags per warp, lane l holding
 * bag l's first position (lanes past the last bag: INT32_MAX). The lane whose bag holds
 * position p (p at or past lane 0's first, before the tile's end) is the last whose first
 * position is at most p: an empty bag's first equals the next one's, so the search passes over
 * it. first(l): lane l's first position (on the GPU a shuffle, which every lane calls); five
 * halving steps, since lane 0 always qualifies. */
template <typename F> __host__ __device__ inline int bwd_tile_lane(F first, int64_t p)
{
  int j = 0;
#pragma unroll
  for (int step = 16; step >= 1; step /= 2)
    if (first(j + step) <= p)
      j += step;
  return j;
}

/* bwd.steal: a batch of short runs, items [lo, hi) of its tier's list (bwd_steal_range). */
struct alignas(8) bwd_batch {
  int32_t lo, hi;
};

/* Device-side counts of one call (zeroed before the classification). */
struct bwd_counts {
  unsigned int shorts[BWD_BUCKETS];
  unsigned int longs;
  unsigned int chunks;
  int num_runs; /* written by the run-length encode */
  /* bwd.steal: short batches the classification wrote per bucket (bwd_steal_range); metadata,
   * like the fields above */
  unsigned int batches[BWD_BUCKETS];
  /* bwd.steal: batches taken so far, per short bucket's launch, by the chunk kernel and by the
   * apply kernel (bwd_steal, bwd_steal_range); zeroed before every launch of the tiers, so no host
   * sync (the fields above are the metadata's, which bwd.hoist makes in the forward: these stay
   * last) */
  unsigned int steal_short[BWD_BUCKETS];
  unsigned int steal_chunk, steal_apply;
};

/* bwd.small_tc (backward_small.cu): a segment of a small table's bags, REF_SMALL_SEG at most,
 * and a small table; the host lists them once, every table the path may ever take, its
 * segments back to back in ref/backward_small.c's order. */
struct bwd_small_seg {
  int64_t bag0;  /* its first bag */
  int64_t crow;  /* that bag's row of the saved counts */
  int32_t nbags;
  int32_t table; /* its table's slot in tc_tables */
};
struct bwd_small_table {
  int64_t E, key0, woff; /* rows, the first row's key (its momentum) and weight element */
  int32_t j, D, seg0, nseg;
};

/* Everything the backward kernels read, as device pointers; sizes are host-known bounds. */
struct dev_bwd {
  dev_batch b;
  void *weights;               /* b.weights, updated in place */
  const void *grad;            /* [out_elems] grad_output in the output dtype */
  float clip;                  /* > 0: clamp G to [-clip, clip] */
  const int64_t *rows_cumsum;  /* [num_tables + 1] the first key of each table */
  int32_t *bag_of_pos;         /* [N] bag of each position (-1 outside every bag); weighted only */
  int val_bag;                 /* sorted values are bags (pooled, unweighted), else positions */
  int32_t B;                   /* bags per feature of a fixed batch (0: VBE) */
  int key64;                   /* keys are uint64 (else uint32) */
  const void *run_key;         /* [N] unique keys of the runs (after the encode) */
  const int32_t *run_len;      /* [N] */
  const int32_t *run_start;    /* [N] exclusive sum of run_len */
  const int32_t *pos;          /* [N] sorted values: bags or positions (val_bag) */
  bwd_counts *counts;
  int32_t direct_D;            /* > 0: the short tier reads the encode's runs (bwd_direct_run):
                                  every table is this wide, table j's rows from element
                                  direct_base + rows_cumsum[j] * direct_D; 0: it reads shorts */
  int64_t direct_base;
  bwd_run *shorts;             /* short runs, bucket k at short_base[k] (unused when direct) */
  int64_t short_base[BWD_BUCKETS + 1];
  bwd_batch *batches;          /* bwd.steal: bucket k's short batches at batch_base[k], written
                                  by the classification (direct: of the encode's runs) */
  int64_t batch_base[BWD_BUCKETS + 1];
  int32_t batch_runs[BWD_BUCKETS]; /* bwd.steal: most runs of a batch of bucket k:
                                      BWD_SHORT_BATCH per group of a warp of its shape */
  bwd_long *longs;             /* [long_cap] */
  int32_t *countdown;          /* [long_cap] chunks left per long run (fused) */
  bwd_chunk *chunks;           /* [chunk_cap] */
  float *part;                 /* deterministic: [chunk_cap][max_D] one partial per chunk */
  double *acc;                 /* atomic: [long_cap][max_D] fp64 sums of a run's partials */
  int64_t long_cap, chunk_cap;
  int32_t threshold, chunk, max_D;
  int32_t short_below;         /* runs shorter take the short tier (bwd_short_below) */
  int atomic, bucket;
  int vec;                     /* 4: every D is a multiple of 4 (vector loads), else 1 */
  int short_width, long_width; /* entries in flight per group: 2 or 4 (capped by the shape's
                                  U); 0: the policy, 2 */
  int32_t grid;                /* blocks of the chunk kernel and the short tier; 0: the
                                  policy */
  int order;                   /* gpu_chunk_order: which chunk program each group slot takes */
  uint64_t order_key;          /* GPU_ORDER_SHUFFLE: the permutation's key (the case seed's) */
  uint32_t delay;              /* bwd.delay: chunk programs sleep below it (ns) before they
                                  publish their partial; 0: never */
  uint32_t launch;             /* the session's count of backward launches: bwd.delay's sleeps
                                  differ from launch to launch */
  int64_t sentinel;            /* key of positions that make no entry (-1, outside every bag) */
  float *momentum;             /* [rows] or NULL */
  float *psw_grad;             /* [N] or NULL */
  dev_opt opt;
  int steal;                   /* bwd.steal: the short and long tiers' kernels take their work
                                  from the counters of bwd_counts (bwd_steal) on a resident
                                  grid; 0: grid-stride loops */
  int32_t short_block;         /* bwd.short_block: K (1..32, a power of 2): the short tier's
                                  groups take their runs in blocks of K steps of adjacent runs
                                  (bwd_blocked); 0: the grid-stride loop (both on the resident
                                  grid) */
  int bulk;                    /* bwd.bulk (atomic only): the chunk kernel's partials go to
                                  w.acc by bulk reduce from shared memory (backward_long.cu) */
  /* bwd.small_tc (NULL tc_ok: off, or no table may take it in this configuration) */
  const unsigned char *tc_plan; /* [num_tables] 1: the host's plan gives the table the path */
  unsigned char *tc_ok;        /* [num_tables] this call's: the plan less the fallbacks (the
                                  check kernel), read by the keys kernel and the path */
  const uint16_t *tc_counts;   /* [rows of counts][REF_SMALL_MAX_E] fp16 counts the forward saved */
  const bwd_small_seg *tc_segs;
  const bwd_small_table *tc_tables;
  int32_t tc_nseg, tc_ntables;
  float *tc_part;              /* [tc_nseg][REF_SMALL_MAX_E][128] the segments' partials */
  unsigned char *tc_touched;   /* [tc_ntables][REF_SMALL_MAX_E] rows some count touched */
};

__device__ __forceinline__ uint64_t bwd_key(const dev_bwd &w, int64_t r)
{
  return w.key64 ? ((const uint64_t *)w.run_key)[r] : ((const uint32_t *)w.run_key)[r];
}

/* Whether a run of len entries goes through the short tier (the classification and the direct
 * short tier ask the same question): below the threshold, or one chunk (bwd_short_below). */
__device__ __forceinline__ bool bwd_is_short(const dev_bwd &w, int32_t len)
{
#if defined(TBE_FAULT_THRESHOLD_GT) /* planted: a run of the limit's length counted short */
  return len <= w.short_below;
#else
  return len < w.short_below;
#endif
}

/* Run r of the encode as the short tier sees it (direct): its descriptor, or the empty run
 * (length 0, key 0) when it is long or the sentinel's, which other tiers own or nobody does.
 * The table is not needed: every table has one width and row key's weights start at element
 * direct_base + key * direct_D. */
__device__ __forceinline__ bwd_run bwd_direct_run(const dev_bwd &w, int32_t r)
{
  const uint64_t key = bwd_key(w, r);
  const int32_t len = w.run_len[r], start = w.run_start[r]; /* loaded together */
  if (key == (uint64_t)w.sentinel || !bwd_is_short(w, len))
    return bwd_run{};
  return {start, len, 0, 0, key};
}

/* Element offset of G's row for an entry of bag `bag` at position p (pooled: the bag's slice;
 * NONE: the position's row). */
__device__ __forceinline__ int64_t bwd_g_row(const dev_bwd &w, int32_t bag, int64_t p, int32_t D)
{
  if (w.b.pool == TBE_POOL_NONE)
    return p * D;
  if (w.b.bag_out)
    return w.b.bag_out[bag];
  const int32_t t = bag / w.B;
  return (int64_t)(bag - t * w.B) * w.b.total_D + w.b.D_offsets[t];
}

/* G at element e, with the bag's MEAN scale s (1 when not MEAN). */
__device__ __forceinline__ float bwd_g(const dev_bwd &w, int64_t e, float s)
{
  float v = w.b.out_dtype == TBE_FP32 ? ((const float *)w.grad)[e]
                                      : dev_from_16(((const uint16_t *)w.grad)[e], w.b.out_dtype);
  if (w.clip > 0.0f)
    v = v > w.clip ? w.clip : v < -w.clip ? -w.clip : v;
  return w.b.pool == TBE_POOL_MEAN ? __fmul_rn(v, s) : v;
}

/* MEAN's fp32 1.0f/(float)L of a bag. */
__device__ __forceinline__ float bwd_mean_scale(const dev_bwd &w, int32_t bag)
{
  if (w.b.pool != TBE_POOL_MEAN)
    return 1.0f;
  const int64_t L = ld_index(w.b.offsets, w.b.itype, bag + 1) - ld_index(w.b.offsets, w.b.itype, bag);
  return __fdiv_rn(1.0f, __ll2float_rn(L));
}

/* One sorted entry's contribution source: G's row, the MEAN scale, the per-sample weight. */
struct bwd_src {
  int64_t row;
  float scale, pw;
};

/* The sorted value (bag or position, as val_bag says) of entry s + lane of a stretch [s, e),
 * or 0 past e: a group loads W entries' values at once, coalesced. */
__device__ __forceinline__ int32_t bwd_pos(const dev_bwd &w, int32_t s, int32_t e, int lane)
{
  return s + lane < e ? w.pos[s + lane] : 0;
}

/* The source of an entry whose sorted value is v. */
template <bool PLAIN>
__device__ __forceinline__ bwd_src bwd_entry(const dev_bwd &w, int32_t v, int32_t D)
{
  int32_t bag = v;
  int64_t p = v;
  if (!w.val_bag)
    bag = w.b.pool == TBE_POOL_NONE ? 0 : w.bag_of_pos ? w.bag_of_pos[p] : 0;
  if (PLAIN)
    return {bwd_g_row(w, bag, p, D), 1.0f, 0.0f};
  return {bwd_g_row(w, bag, p, D), bwd_mean_scale(w, bag), w.b.psw ? w.b.psw[p] : 0.0f};
}

/* The common training case, where a contribution is G itself: fp32 grad_output, no clipping,
 * no MEAN scale, no per-sample weights. The gather then compiles to plain loads and adds; the
 * generic form tests each of those per element (uniform branches, but several instructions per
 * element and entry). Both do the same fp32 operations, so the same bits. */
__host__ __device__ inline bool bwd_plain(const dev_bwd &w)
{
  return w.b.out_dtype == TBE_FP32 && !(w.clip > 0.0f) && w.b.pool != TBE_POOL_MEAN &&
         w.b.psw == nullptr;
}

/* The short tier's common case, whose kernel is built for it (short_kernel's FAST): the plain
 * gather (bwd_plain) with vector loads, fp16 weights, row-wise Adagrad, no stochastic
 * rounding. */
inline bool bwd_fast(const dev_bwd &w)
{
  return w.vec == 4 && bwd_plain(w) && w.b.wdtype == TBE_FP16 &&
         w.opt.kind == REF_OPT_ROWWISE_ADAGRAD && !w.opt.sr;
}

/* How a group covers a row of next_pow2(D) = 2^K columns, VEC (1 or 4) consecutive columns per
 * load: W lanes, CPL chunks per lane; lane l's chunk c holds columns VEC*(l + W*c) + v. Rows of
 * 4..64 chunks use 16 lanes (two rows per warp), wider ones 32. */
template <int VEC, int K> struct bwd_shape {
  static constexpr int P = 1 << K;
  static constexpr int CH = VEC == 1 ? P : (P / 4 > 0 ? P / 4 : 1);
  static constexpr int W = VEC == 1 ? (CH < 32 ? CH : 32) : (CH <= 16 ? CH : CH <= 64 ? 16 : 32);
  static constexpr int CPL = CH / W;
  static constexpr int COLS = CPL * VEC; /* columns per lane */
  static constexpr int U = COLS <= 8 ? 4 : COLS <= 16 ? 2 : 1; /* entries in flight (policy) */
};

/* The short tier's group shape: bwd_shape's, but a row of 16 chunks (33..64 columns at VEC 4)
 * takes 8 lanes of 2 chunks, four rows to a warp, not 16 lanes of one chunk. A short run is a
 * few dependent trips to memory (its descriptor, its gradient rows, its weights), so a warp
 * with more runs in flight hides more of them; measured faster (bench/RESULTS.md), while rows
 * of 32 chunks lost at 8 lanes (4 chunks a lane keep fewer blocks resident) and stay at 16.
 * Each lane still adds its columns in the run's order and dev_sum_squares holds the 32-lane
 * scheme for every W, so the bits are bwd_shape's. Entries in flight: bwd_shape's U (its rule
 * gives 4 to 4 and to 8 columns a lane alike). */
template <int VEC, int K> struct bwd_short_shape {
  typedef bwd_shape<VEC, K> S;
  static constexpr int W = VEC == 4 && S::CH == 16 ? 8 : S::W;
  static constexpr int CPL = S::CH / W;
  static constexpr int U = S::U;
};

/* VEC consecutive values of G from element e (aligned to VEC when VEC = 4), with the scale
 * (PLAIN: bwd_plain holds, G as it is). */
template <int VEC, bool PLAIN>
__device__ __forceinline__ void bwd_load_g(const dev_bwd &w, int64_t e, float sc, float (&x)[VEC])
{
  const bool fp32 = PLAIN || w.b.out_dtype == TBE_FP32;
  if (VEC == 4 && fp32) {
    const float4 f = __ldg((const float4 *)((const float *)w.grad + e));
    x[0] = f.x;
    x[1 % VEC] = f.y;
    x[2 % VEC] = f.z;
    x[3 % VEC] = f.w;
  } else if (VEC == 4) {
    const uint2 u = __ldg((const uint2 *)((const uint16_t *)w.grad + e));
    x[0] = dev_from_16((uint16_t)u.x, w.b.out_dtype);
    x[1 % VEC] = dev_from_16((uint16_t)(u.x >> 16), w.b.out_dtype);
    x[2 % VEC] = dev_from_16((uint16_t)u.y, w.b.out_dtype);
    x[3 % VEC] = dev_from_16((uint16_t)(u.y >> 16), w.b.out_dtype);
  } else {
    x[0] = fp32 ? __ldg((const float *)w.grad + e)
                : dev_from_16(__ldg((const uint16_t *)w.grad + e), w.b.out_dtype);
  }
  if (!PLAIN) {
#pragma unroll
    for (int v = 0; v < VEC; v++) {
      float y = x[v];
      if (w.clip > 0.0f)
        y = y > w.clip ? w.clip : y < -w.clip ? -w.clip : y;
      x[v] = w.b.pool == TBE_POOL_MEAN ? __fmul_rn(y, sc) : y;
    }
  }
}

/* acc = the sum from +0 of sorted entries [s, e) of a run of a table of width D, in order, per
 * column. A group of W lanes calls it together: it takes W entries' sources at once (v0: this
 * lane's bwd_pos of the first W, loaded by the caller, maybe a run ahead; the next W load
 * here), then walks them in order, U entries' rows loaded ahead of their adds. The walk takes
 * `span` >= e - s steps, the same for every lane in `mask` (the steps past e add nothing), so
 * the groups of a warp can step together and shuffle with a constant mask. Entries are
 * positions of one call (below 2^31: int32). */
template <int W, int CPL, int VEC, int U, bool PLAIN>
__device__ __forceinline__ void bwd_sum(const dev_bwd &w, int32_t s, int32_t e, int32_t span,
                                        int32_t D, int32_t v0, float (&acc)[CPL][VEC], int lane,
                                        unsigned mask)
{
#pragma unroll
  for (int c = 0; c < CPL; c++)
#pragma unroll
    for (int v = 0; v < VEC; v++)
      acc[c][v] = 0.0f;
  const bool weighted = !PLAIN && w.b.psw != nullptr, mean = !PLAIN && w.b.pool == TBE_POOL_MEAN;
  for (int32_t k0 = s; k0 < s + span; k0 += W) {
    bwd_src mine = {0, 1.0f, 0.0f};
    if (k0 + lane < e)
      mine = bwd_entry<PLAIN>(w, k0 == s ? v0 : w.pos[k0 + lane], D);
    const int n = min(W, s + span - k0), here = min(W, e - k0);
    for (int i = 0; i < n; i += U) {
      float x[U][CPL][VEC], pw[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int src = i + u < n ? i + u : i;
        const int64_t r = __shfl_sync(mask, mine.row, src, W);
        const float sc = mean ? __shfl_sync(mask, mine.scale, src, W) : 1.0f;
        pw[u] = weighted ? __shfl_sync(mask, mine.pw, src, W) : 0.0f;
#pragma unroll
        for (int c = 0; c < CPL; c++)
          if (VEC * (lane + W * c) < D && i + u < here)
            bwd_load_g<VEC, PLAIN>(w, r + VEC * (lane + W * c), sc, x[u][c]);
      }
#pragma unroll
      for (int u = 0; u < U; u++)
        if (i + u < here)
#pragma unroll
          for (int c = 0; c < CPL; c++)
#pragma unroll
            for (int v = 0; v < VEC; v++)
              acc[c][v] = weighted ? __fmaf_rn(pw[u], x[u][c][v], acc[c][v])
                                   : __fadd_rn(acc[c][v], x[u][c][v]);
    }
  }
}

/* Calls f(integral_constant VEC, integral_constant K) for the bucket k of a call's VEC. */
template <int V> struct bwd_ic {
  static constexpr int value = V;
};
template <int VEC, typename F> void bwd_dispatch_k(int k, F &&f)
{
  switch (k) {
  case 0: f(bwd_ic<VEC>(), bwd_ic<0>()); break;
  case 1: f(bwd_ic<VEC>(), bwd_ic<1>()); break;
  case 2: f(bwd_ic<VEC>(), bwd_ic<2>()); break;
  case 3: f(bwd_ic<VEC>(), bwd_ic<3>()); break;
  case 4: f(bwd_ic<VEC>(), bwd_ic<4>()); break;
  case 5: f(bwd_ic<VEC>(), bwd_ic<5>()); break;
  case 6: f(bwd_ic<VEC>(), bwd_ic<6>()); break;
  case 7: f(bwd_ic<VEC>(), bwd_ic<7>()); break;
  case 8: f(bwd_ic<VEC>(), bwd_ic<8>()); break;
  case 9: f(bwd_ic<VEC>(), bwd_ic<9>()); break;
  case 10: f(bwd_ic<VEC>(), bwd_ic<10>()); break;
  default: f(bwd_ic<VEC>(), bwd_ic<11>()); break;
  }
}
template <typename F> void bwd_dispatch(int vec, int k, F &&f)
{
  if (vec == 4)
    bwd_dispatch_k<4>(k, f);
  else
    bwd_dispatch_k<1>(k, f);
}

/* Calls go(integral_constant U') for a tier's entries in flight: the shape's U when the width
 * asked is 4 (or U is at most 2), else 2 (the policy, with width 0). */
template <int U, typename F> void bwd_with_width(int width, F &&go)
{
  if (width == 4 || U <= 2)
    go(bwd_ic<U>());
  else
    go(bwd_ic<2>());
}

/* The lanes of this thread's group within its warp. */
template <int W> __device__ __forceinline__ unsigned bwd_group_mask()
{
  return W == 32 ? 0xffffffffu : ((1u << W) - 1u) << ((threadIdx.x & 31) / W * W);
}

/* Persistent work stealing (bwd.steal), the stand-in on Hopper for Blackwell's cluster launch
 * control: a group of W lanes takes its items (runs, chunk programs, long runs) in turn from
 * batches that a warp of G = 32 / W groups asks a device counter for (atomicInc: batches go to
 * warps in the order they ask). A warp asks for its next batch as it starts one and first reads
 * it when that one is used up, so the atomic's round trip overlaps a batch's work; it holds at
 * most one batch it has not started. Lanes of a warp ask and take together (the tiers' loops are
 * warp-uniform). The counter's limit is 2^31 - 1, which no count reaches (at most the batches
 * plus two per warp, fewer than 2^31): it keeps atomicInc an increment in the machine code (an
 * unlimited one compiles to the add that gpu/fence_sass_test.py reads as a countdown). */
__device__ __forceinline__ uint32_t bwd_steal_ask(unsigned *ctr)
{
  return (threadIdx.x & 31) == 0 ? atomicInc(ctr, 0x7fffffffu) : 0u;
}
/* The batch lane 0 asked for, in every lane. */
__device__ __forceinline__ uint32_t bwd_steal_got(uint32_t asked)
{
  uint32_t b = __shfl_sync(0xffffffffu, asked, 0);
#if defined(TBE_FAULT_STEAL_SKIP) /* planted: batch 0 is never taken, its items never done */
  b++;
#endif
  return b;
}

/* The long tier's batches (chunk and apply kernels): K*G items each. Batch b's group g takes
 * items (j*NB + b)*G + g, j < K, of the NB = ceil(n / (K*G)) batches (with K = 1, the policy,
 * adjacent groups and adjacent batches take adjacent items). The map is a bijection from
 * (b < NB, j < K, g < G) onto [0, NB*K*G), which holds [0, n): each item is taken exactly once,
 * by a group that computes it as any group would. Slots at or past n in a batch below NB read
 * n + g (empty, as past the end of a grid-stride loop), and `in` says whether the slot's batch
 * is below NB: a warp's batches only grow, so once a slot is out, all its later ones are. */
template <int K, int G> struct bwd_steal {
  static constexpr uint32_t KG = (uint32_t)K * G;
  uint32_t nb;    /* NB */
  uint32_t batch; /* the warp's current batch */
  uint32_t ahead; /* lane 0: its next, asked for */
  int j;          /* the current batch's next slot */

  template <typename I> __device__ void start(unsigned *ctr, I n)
  {
    nb = ((uint32_t)n + KG - 1) / KG;
    batch = bwd_steal_got(bwd_steal_ask(ctr));
    ahead = bwd_steal_ask(ctr);
    j = 0;
  }
  /* The next item of this group (lag: its place in the warp) among n; in: its batch is below
   * NB. */
  template <typename I> __device__ I take(unsigned *ctr, I n, int lag, bool &in)
  {
    const uint32_t b = batch, r = ((uint32_t)j * nb + b) * G;
    if (++j == K) {
      j = 0;
      batch = bwd_steal_got(ahead);
      ahead = bwd_steal_ask(ctr);
    }
    in = b < nb;
    return (I)(in ? min(r, (uint32_t)n) : (uint32_t)n) + lag;
  }
  template <typename I> __device__ I take(unsigned *ctr, I n, int lag)
  {
    bool in;
    return take(ctr, n, lag, in);
  }
};

/* The short tier's batches: consecutive stretches of its list (the bucket's short runs, or with
 * bwd.direct the encode's runs), bounded in runs and in entries, which the classification cuts
 * (backward.cu, classify_batches) and a warp reads as one bwd_batch [lo, hi). Consecutive, so
 * adjacent groups and adjacent steps read adjacent descriptors and sorted positions; bounded in
 * entries, so a stretch of long runs (a Zipf table's hot rows sort together) is cut into small
 * batches and no warp gets a cluster of them, while runs of a few entries make batches of the
 * run cap. Cut by the classification, not searched for by the warp: a list is filled by tiles in
 * the order their atomics land, so its `start` fields are sorted only within a tile's segment
 * and no search over them finds a batch; and a tile holds what a cut needs (its runs in order,
 * its scan), so the batches cost it a second block scan and the warp one 8-byte load per batch,
 * with neither a second pass over the list for a list-wide prefix of entries (a device scan
 * reads every descriptor again) nor a chain of dependent loads per batch (a search).
 * The rule: the classification's tiles of CLS_BLOCK runs each append their runs of a list as one
 * segment of it, and an item of a segment opens a batch when it is the segment's
 * first, when its index in the segment is a multiple of R (batch_runs: BWD_SHORT_BATCH per group
 * of the warp), or when a multiple of BWD_BATCH_ENTRIES lies in (s', s], s its run's first sorted
 * position and s' that of the segment's item before it (positions, not a prefix within the list:
 * runs of other lists and long runs leave gaps, which only cut more batches). A batch runs from
 * an item that opens one to the next, or to its segment's end. So its runs, at most R, start
 * within one window of BWD_BATCH_ENTRIES positions and are disjoint stretches of the sorted
 * entries: together fewer than BWD_BATCH_ENTRIES + short_below entries. Each tile takes its
 * segment's batch numbers with one atomicAdd on the bucket's count of batches (bwd_counts), so
 * the numbers of a list are [0, NB), NB that count, each written (lo by the item that opens it,
 * hi by the next or by the segment's last item) before the tier's launch; the batches of a
 * segment partition it and the segments partition the list. A warp given batch b < NB steps
 * through it G items at a time, group g taking lo + jG + g while below hi: over its steps that
 * is [lo, hi) once. Each batch number is given once, so each item is taken exactly once, by a
 * group that computes it as any group would. A step of a batch below NB is `in`, its groups past
 * hi read n (the empty run); a warp's batch only changes to a later one, and once it is at or
 * past NB it stays, so once a step is out all its later ones are. The range of the batch a warp
 * switches to is loaded then and first read at its next take, a run's work later. */
template <int G> struct bwd_steal_range {
  uint32_t nb;    /* NB */
  uint32_t ahead; /* lane 0: the warp's next batch, asked for */
  int32_t s, hi;  /* the current batch's next step's first item, and its end; hi 0: none (the
                     warp's batch is at or past NB; a batch's hi is at least 1) */

  __device__ void load(const bwd_batch *list, uint32_t batch)
  {
    const bwd_batch r = batch < nb ? list[batch] : bwd_batch{0, 0};
    s = r.lo;
    hi = r.hi;
  }
  /* list: [n_batches] the list's batches */
  __device__ void start(unsigned *ctr, const bwd_batch *list, uint32_t n_batches)
  {
    nb = n_batches;
    load(list, bwd_steal_got(bwd_steal_ask(ctr)));
    ahead = bwd_steal_ask(ctr);
  }
  /* The next item of this group (lag: its place in the warp) among n (n: none); in: its step
   * belongs to a batch below NB. */
  __device__ int32_t take(unsigned *ctr, const bwd_batch *list, int32_t n, int lag, bool &in)
  {
    in = hi > 0;
    const int32_t i = s + lag < hi ? s + lag : n;
    s += G;
    if (in && s >= hi) {
      load(list, bwd_steal_got(ahead));
      ahead = bwd_steal_ask(ctr);
    }
    return i;
  }
};

/* bwd.short_block = K: the short tier's map of steps to runs. A warp of G = 32 / W groups takes
 * blocks of K*G adjacent runs, one block per K steps, its group g taking run lo + jG + g at step
 * j of the block; warp v of the grid's NW takes blocks v, v + NW, v + 2NW, ... So a group's
 * consecutive steps read adjacent descriptors, sorted positions and (for adjacent keys) adjacent
 * weight rows and momentum words, as bwd.steal's consecutive batches do, without a counter.
 * Step j of group g of warp v takes ((j / K) * NW + v) * K*G + (j % K) * G + g: a bijection from
 * (v < NW, j >= 0, g < G) onto the naturals, so each run is taken exactly once, by a group that
 * computes it as any group would (no bit depends on the map). With K = 1 it is the grid-stride
 * loop's map. A warp's steps only grow, so once one is at or past n all its later ones are: `in`
 * says it is below. Counted in 32 bits: a warp's steps stop within two blocks' rounds of n
 * (the pipeline looks two runs ahead), at most n + 2 * NW*K*G < 2^32 for n < 2^31. */
template <int G> struct bwd_blocked {
  uint32_t at;    /* this group's run at the next step */
  uint32_t step;  /* the next step */
  uint32_t kmask; /* K - 1 (K a power of 2) */
  uint32_t jump;  /* (NW - 1) * K*G: from a block's end to the warp's next block */

  /* K = k, this group's place lag in warp v of the grid's nw (host code too: short_map_test) */
  __host__ __device__ void start(int32_t k, int lag, uint32_t nw, uint32_t v)
  {
    kmask = (uint32_t)k - 1;
    jump = (nw - 1) * (uint32_t)k * G;
    at = v * (uint32_t)k * G + (uint32_t)lag;
    step = 0;
  }
  /* This group's run at the next step among n (n: none, past the end); in: the warp's step is
   * below n. */
  __host__ __device__ int32_t take(int32_t n, int lag, bool &in)
  {
    const uint32_t r = at;
    at += G;
    if ((++step & kmask) == 0)
      at += jump;
    in = r - (uint32_t)lag < (uint32_t)n;
    return (int32_t)(r < (uint32_t)n ? r : (uint32_t)n);
  }
};

/* The grid of bwd.steal's kernels and of bwd.short_block's short tier, for kernel f of `block`
 * threads and smem bytes of dynamic shared memory: w.grid when given, else the blocks the device
 * keeps resident at once (SMs x cudaOccupancyMaxActiveBlocksPerMultiprocessor), at most want
 * (the grid-stride loop's grid: no more groups than the tier's bound of work asks for). */
tbe_status gpu_bwd_resident_grid(const dev_bwd &w, const void *f, int block, int64_t want,
                              unsigned *blocks, size_t smem = 0);

/* The table j's element offset of row `row`. */
__device__ __forceinline__ int64_t bwd_weight_at(const dev_bwd &w, int32_t j, int64_t row)
{
  return w.b.table_offset[j] + row * w.b.D[j];
}

/* The transpose's buffers (transpose.cu): keys and positions double-buffered for the sort, the
 * runs, and CUB's temporary storage. */
struct gpu_transpose_bufs {
  void *keys[2];      /* [N] K */
  int32_t *pos[2];    /* [N] */
  void *run_key;      /* [N] K */
  int32_t *run_len, *run_start; /* [N] */
  void *temp;
  size_t temp_bytes;
  int end_bit;        /* bits of the sentinel key: the sort looks at [0, end_bit) */
};

/* CUB's temporary bytes for N entries of keys K (uint32_t or uint64_t). */
template <typename K> tbe_status gpu_transpose_bytes(int64_t N, int end_bit, size_t *bytes);
/* Keys, sort, runs: fills w.pos, w.run_key, w.run_len, w.run_start and the device count of
 * runs. state (FATAL only, else NULL): a named offender turns every position into the
 * sentinel. */
template <typename K>
tbe_status gpu_transpose(dev_bwd &w, const gpu_transpose_bufs &t, const dev_bounds *state,
                         cudaStream_t stream);

/* Blocks that fill every SM several times over: grids of the grid-stride kernels stop here. */
int64_t gpu_bwd_max_blocks();

/* Launchers (backward_short.cu, backward_long.cu); each reads its counts on the device. */
tbe_status gpu_bwd_short(const dev_bwd &w, int bucket, int64_t cap, cudaStream_t stream);
tbe_status gpu_bwd_long(const dev_bwd &w, int fused, cudaStream_t stream);
/* bwd.small_tc (backward_small.cu), when w.tc_ok: the check that sets this call's tc_ok from the
 * plan (part of the metadata: the keys kernel reads it; a FATAL stop needs nothing here, its
 * keys are all the sentinel and the path sees state), and the path's segments and row updates;
 * state as for gpu_transpose. */
tbe_status gpu_bwd_small_check(const dev_bwd &w, cudaStream_t stream);
tbe_status gpu_bwd_small(const dev_bwd &w, const dev_bounds *state, cudaStream_t stream);

#endif
