/* backward_short.cu: the short-run path of the GPU backward: one group of lanes owns one run
 * (bwd_is_short: SL < threshold, or one chunk of at most 256 entries) from start to end: it sums
 * the run's gradient rows, applies the optimizer and stores the row with plain stores, no
 * atomics. Twin of ref/backward_short.c (the one-sequence sum, ref_bwd_short_grad); not long runs
 * (backward_long.cu).
 *
 * Accumulation order: the run's entries one at a time in sorted order from +0 (bwd_sum), then
 * the optimizer (optimizer.cuh). Each run is owned by one group, so the bits do not depend on
 * the order of the short list (the classification fills it with atomics).
 * Buckets: a launch per next_pow2(D) bucket, each with its group shape (bwd_short_shape); with
 * bucketing off every short run goes through the widest table's bucket. Direct (bwd.direct,
 * where every table has one width and the tables lie back to back): one launch walks the
 * encode's runs itself, passing over the long ones and the sentinel's, so the classification
 * writes no short list and this tier reads no descriptor.
 */
#include "backward_impl.cuh"
#include "cuda_check.h"

namespace {

const int BLOCK = 128;

/* The common-case kernel (FAST) with two rows in flight: the leanest in registers. */
__host__ __device__ constexpr bool short_lean(bool fast, int u)
{
  return fast && u <= 2;
}

/* policy: the loads ahead (below) pay only where they cost no occupancy: rows of 128 columns
 * keep their resident blocks under a register cap, while 64 columns lose a block and 256 spill,
 * so those load as before (each run's head when it starts, its weights after its sum); the lean
 * kernel keeps its blocks with them at 64 columns too (short_min_blocks). The measurements
 * behind it: bench/RESULTS.md, the backward's policy evidence. */
__host__ __device__ constexpr bool short_ahead(int cols, int vec, bool lean)
{
  return vec == 4 && (cols == 128 || (lean && cols == 64));
}

/* policy: the blocks per SM that the register cap keeps resident, each the most that ptxas
 * meets without a spill (ptxas -v; more resident warps hide more of a run's memory latency):
 * rows of 128 columns (16 lanes of 8 columns) and of 64 (8 lanes of 8, bwd_short_shape) 6
 * lean, else 5. */
constexpr int short_min_blocks(int cols, int vec, bool lean)
{
  return vec == 4 && (cols == 128 || cols == 64) ? (lean ? 6 : 5) : 1;
}

/* Run i of the tier's n: the list's descriptor, or (DIRECT) the encode's run i, empty where it
 * is not short (bwd_direct_run); past n the empty run. A group whose run is empty is not live:
 * it only keeps its warp's steps together. */
template <bool DIRECT>
__device__ __forceinline__ bwd_run short_run(const dev_bwd &w, const bwd_run *list, int32_t i,
                                             int32_t n)
{
  if (i >= n)
    return bwd_run{};
  return DIRECT ? bwd_direct_run(w, i) : list[i];
}

/* What a run's sum and update need first, loaded a run ahead: its table's width, this lane's
 * first sorted value and the weight element of the row's column 0. */
struct short_head {
  int32_t D, v0;
  int64_t at;
};

/* The weight element of run r's row, column 0 (DIRECT: the tables lie back to back, one wide). */
template <bool DIRECT>
__device__ __forceinline__ int64_t short_weight_at(const dev_bwd &w, const bwd_run &r)
{
  if (DIRECT)
    return w.direct_base + (int64_t)r.key * w.direct_D;
  return bwd_weight_at(w, r.table, (int64_t)(r.key - (uint64_t)w.rows_cumsum[r.table]));
}

template <bool DIRECT>
__device__ __forceinline__ short_head short_head_load(const dev_bwd &w, const bwd_run &r,
                                                      int lane)
{
  if (r.len == 0) /* not live (table 0 may be wider than this bucket) */
    return {0, 0, 0};
  return {DIRECT ? w.direct_D : w.b.D[r.table], bwd_pos(w, r.start, r.start + r.len, lane),
          short_weight_at<DIRECT>(w, r)};
}

/* Which runs a group takes, in which order (each run is one group's from start to end, so no
 * bit depends on it): the grid-stride loop; blocks of adjacent runs on the resident grid
 * (bwd.short_block, bwd_blocked); or batches from a counter (bwd.steal, bwd_steal_range). */
enum short_sched { SHORT_STRIDE, SHORT_BLOCKED, SHORT_STEAL };

/* The groups of a warp step together: the warp runs while its first group has a run, and
 * each run is walked for the warp's longest (bwd_sum's span), so every shuffle has the constant
 * full mask (a per-group mask makes the compiler wrap each one in a convergence loop). With
 * AHEAD a group's runs go through a three-stage pipeline, so that one trip to memory is waited
 * for per run, not four: the descriptor two runs ahead, the head one run ahead, then this run's
 * gradient rows with its weights and momentum loaded beside them. Without it the descriptor is
 * one run ahead. Runs are counted in int32 (fewer than N < 2^31). DIRECT: the runs are the
 * encode's, every one of them, the long and the sentinel's empty. FAST (bwd_fast holds): the
 * plain gather, fp16 weights, row-wise Adagrad without stochastic rounding, all as constants;
 * the same operations as the generic kernel's on those cases, without their tests. SCHED
 * (short_sched) maps the steps to runs: SHORT_STEAL's come from bwd_steal_range, a batch of
 * consecutive runs (at most BWD_SHORT_BATCH per group, bounded in entries) at a time, in the
 * order the counter gives the batches; SHORT_BLOCKED's from bwd_blocked. The pipeline is the
 * same for each. */
template <int W, int CPL, int VEC, int U, bool FAST, bool DIRECT, int SCHED>
__global__ void __launch_bounds__(BLOCK, short_min_blocks(W * CPL * VEC, VEC, short_lean(FAST, U)))
    short_kernel(dev_bwd w, int k)
{
  constexpr bool AHEAD = short_ahead(W * CPL * VEC, VEC, short_lean(FAST, U));
  /* TAKEN: the runs come from take (STEAL or BLOCKED), not from the grid stride */
  constexpr bool STEAL = SCHED == SHORT_STEAL, TAKEN = SCHED != SHORT_STRIDE;
  const int lane = threadIdx.x % W;
  const unsigned full = 0xffffffffu;
  const tbe_dtype wt = FAST ? TBE_FP16 : w.b.wdtype;
  const dev_opt o = dev_opt_as<FAST>(w.opt);
  const int32_t n = DIRECT ? w.counts->num_runs : (int32_t)w.counts->shorts[k];
  const bwd_run *list = DIRECT ? nullptr : w.shorts + w.short_base[k];
  const int32_t groups = (int32_t)gridDim.x * (BLOCK / W);
  int32_t i = (int32_t)blockIdx.x * (BLOCK / W) + (int32_t)threadIdx.x / W;
  const int32_t lag = (threadIdx.x % 32) / W; /* this group's place in its warp */
  unsigned *const ctr = w.counts->steal_short + k;
  const bwd_batch *const batches = w.batches + w.batch_base[k]; /* STEAL: the list's */
  bwd_steal_range<32 / W> st;
  bwd_blocked<32 / W> bl;
  /* the next step's run of a STEAL or BLOCKED schedule; in: its warp's step is in */
  auto take = [&](bool &in) {
    return STEAL ? st.take(ctr, batches, n, lag, in) : bl.take(n, lag, in);
  };
  /* STEAL, BLOCKED: how many runs of the pipeline are in (bwd_steal_range, bwd_blocked), the
   * loop's condition in place of i (once a warp's step is out, its later ones are, so those are
   * the pipeline's first ones) */
  int32_t left = 0, i1 = 0; /* i1: with AHEAD, the run after i */
  bool in = false;
  if constexpr (TAKEN) {
    if (STEAL)
      st.start(ctr, batches, w.counts->batches[k]);
    else
      bl.start(w.short_block, lag, gridDim.x * (BLOCK / 32),
               (blockIdx.x * BLOCK + threadIdx.x) / 32);
    i = take(in);
    left = in;
    if (AHEAD) {
      i1 = take(in);
      left += in;
    }
  }
  bwd_run next = short_run<DIRECT>(w, list, i, n); /* this run's descriptor, loaded a run ago */
  bwd_run ahead = AHEAD ? short_run<DIRECT>(w, list, TAKEN ? i1 : i + groups, n)
                        : bwd_run{}; /* the next */
  short_head h = AHEAD ? short_head_load<DIRECT>(w, next, lane) : short_head{};
  while (TAKEN ? left > 0 : i - lag < n) {
    const bwd_run r = next;
    const bool live = r.len > 0;
    /* the run whose descriptor loads now */
    const int32_t far = TAKEN ? take(in) : i + (AHEAD ? 2 : 1) * groups;
    if constexpr (TAKEN)
      left += (int32_t)in - 1; /* far joins, r leaves */
    if (!AHEAD) {
      next = short_run<DIRECT>(w, list, far, n);
      h = short_head_load<DIRECT>(w, r, lane);
    }
    /* FAST: row-wise Adagrad, so the momentum is there (gpu_bwd_open requires it) */
    float *m = (FAST || w.momentum) ? w.momentum + r.key : nullptr;
    dev_row<W, CPL, VEC, AHEAD> wr;
    short_head after{};
    if (AHEAD) {
      dev_row_load(wr, w.weights, wt, h.at, h.D, m, lane);
      after = short_head_load<DIRECT>(w, ahead, lane);
      next = ahead;
      ahead = short_run<DIRECT>(w, list, far, n);
    }
    float g[CPL][VEC];
    const int32_t span = W < 32 ? (int32_t)__reduce_max_sync(full, (unsigned)r.len) : r.len;
    bwd_sum<W, CPL, VEC, U, FAST>(w, r.start, r.start + r.len, span, h.D, h.v0, g, lane, full);
    if (!AHEAD) /* after the sum: fewer registers live across it */
      dev_row_load(wr, w.weights, wt, h.at, h.D, m, lane);
    dev_update_row<W, CPL, VEC>(o, w.weights, wt, h.D, g, wr, m, r.key, lane, full, live);
    if (AHEAD)
      h = after;
    if constexpr (SCHED == SHORT_STRIDE)
      i += groups;
  }
}

} // namespace

tbe_status gpu_bwd_short(const dev_bwd &w, int k, int64_t cap, cudaStream_t stream)
{
  if (cap == 0)
    return tbe_ok();
  const bool fast = bwd_fast(w);
  tbe_status st = tbe_ok();
  bwd_dispatch(w.vec, k, [&](auto vec, auto kk) {
    constexpr int VEC = decltype(vec)::value;
    typedef bwd_short_shape<VEC, decltype(kk)::value> S;
    const int64_t want = (cap + BLOCK / S::W - 1) / (BLOCK / S::W);
    /* policy: two rows in flight, measured faster than four (bench/RESULTS.md) */
    auto go = [&](auto u) {
      constexpr int U = decltype(u)::value;
      auto at = [&](auto fast_, auto direct) {
        /* FAST only with vector loads (bwd_fast): VEC = 1 builds the generic kernel alone */
        constexpr bool F = decltype(fast_)::value != 0 && VEC == 4;
        constexpr bool DIRECT = decltype(direct)::value != 0;
        /* policy: every schedule on the resident grid (or bwd.grid's), the grid-stride loop
         * too: with more blocks than stay resident, the last wave runs part-full (faster on
         * four of the five shapes measured, bench/RESULTS.md) */
        auto kernel = [&](auto sched) {
          return short_kernel<S::W, S::CPL, VEC, U, F, DIRECT, decltype(sched)::value>;
        };
        const auto f = w.steal         ? kernel(bwd_ic<SHORT_STEAL>())
                       : w.short_block ? kernel(bwd_ic<SHORT_BLOCKED>())
                                       : kernel(bwd_ic<SHORT_STRIDE>());
        unsigned grid = 0;
        st = gpu_bwd_resident_grid(w, (const void *)f, BLOCK, want, &grid);
        if (st.code == TBE_OK)
          f<<<grid, BLOCK, 0, stream>>>(w, k);
      };
      auto with_direct = [&](auto fast_) {
        if (w.direct_D)
          at(fast_, bwd_ic<1>());
        else
          at(fast_, bwd_ic<0>());
      };
      if (fast)
        with_direct(bwd_ic<1>());
      else
        with_direct(bwd_ic<0>());
    };
    bwd_with_width<S::U>(w.short_width, go);
  });
  if (st.code != TBE_OK)
    return st;
  GPU_TRY(cudaGetLastError());
  return tbe_ok();
}
