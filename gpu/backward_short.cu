/* backward_short.cu: the short-run path of the GPU backward: one group of lanes owns one run
 * (SL < threshold) from start to end: it sums the run's gradient rows, applies the optimizer and
 * stores the row with plain stores, no atomics. Twin of ref/backward_short.c (the one-sequence
 * sum, ref_bwd_short_grad); not long runs (backward_long.cu).
 *
 * Accumulation order: the run's entries one at a time in sorted order from +0 (bwd_sum), then
 * the optimizer (optimizer.cuh). Each run is owned by one group, so the bits do not depend on
 * the order of the short list (the classification fills it with atomics).
 * Buckets: a launch per next_pow2(D) bucket, each with its group shape (bwd_shape); with
 * bucketing off every short run goes through the widest table's bucket.
 */
#include <algorithm>

#include "backward_impl.cuh"
#include "cuda_check.h"

namespace {

const int BLOCK = 128;

/* The groups of a warp step together: the warp runs while its first group has a run, and
 * each run is walked for the warp's longest (bwd_sum's span), so every shuffle and warp sync
 * has the constant full mask (a per-group mask makes the compiler wrap each one in a
 * convergence loop). */
template <int W, int CPL, int VEC, int U, bool PLAIN>
__global__ void __launch_bounds__(BLOCK) short_kernel(dev_bwd w, int k)
{
  __shared__ __align__(16) float rows[BLOCK / W][W * CPL * VEC];
  const int lane = threadIdx.x % W;
  const unsigned full = 0xffffffffu;
  float *x = rows[threadIdx.x / W];
  const int64_t n = w.counts->shorts[k];
  const bwd_run *list = w.shorts + w.short_base[k];
  const int64_t groups = (int64_t)gridDim.x * (BLOCK / W);
  int64_t i = (int64_t)blockIdx.x * (BLOCK / W) + threadIdx.x / W;
  const int64_t lag = (threadIdx.x % 32) / W; /* this group's place in its warp */
  bwd_run next = i < n ? list[i] : bwd_run{};
  for (; i - lag < n; i += groups) {
    const bool live = i < n;
    const bwd_run r = next; /* the next run's descriptor loads while this one runs */
    if (i + groups < n)
      next = list[i + groups];
    const int32_t D = live ? w.b.D[r.table] : 0; /* (table 0 may be wider than this bucket) */
    const int64_t row = (int64_t)(r.key - (uint64_t)w.rows_cumsum[r.table]);
    float *m = w.momentum ? w.momentum + r.key : nullptr;
    float g[CPL][VEC];
    const int32_t span = W < 32 ? (int32_t)__reduce_max_sync(full, (unsigned)r.len) : r.len;
    bwd_sum<W, CPL, VEC, U, PLAIN>(w, r.start, (int64_t)r.start + r.len, span, D, g, lane, full);
    dev_row<W, CPL, VEC> wr; /* after the sum: fewer registers live across it */
    dev_row_load(wr, w.weights, w.b.wdtype, bwd_weight_at(w, r.table, row), D, m, lane);
    dev_update_row<W, CPL, VEC>(w.opt, w.weights, w.b.wdtype, D, g, wr, m, r.key, x, lane, full,
                                live);
  }
}

} // namespace

tbe_status gpu_bwd_short(const dev_bwd &w, int k, int64_t cap, cudaStream_t stream)
{
  if (cap == 0)
    return tbe_ok();
  const bool plain = bwd_plain(w);
  bwd_dispatch(w.vec, k, [&](auto vec, auto kk) {
    constexpr int VEC = decltype(vec)::value;
    typedef bwd_shape<VEC, decltype(kk)::value> S;
    const int64_t want = (cap + BLOCK / S::W - 1) / (BLOCK / S::W);
    const unsigned blocks = (unsigned)std::min<int64_t>(want, gpu_bwd_max_blocks());
    /* policy: two rows in flight (H200: 16-19% faster than four on F1, F3, F4, published) */
    /* PLAIN only with vector loads: rows of a D not a multiple of 4 are rare, and each
     * instantiation costs build time (P is false, the generic kernel, when VEC is 1) */
    constexpr bool P = VEC == 4;
    auto go = [&](auto u) {
      constexpr int U = decltype(u)::value;
      if (plain)
        short_kernel<S::W, S::CPL, VEC, U, P><<<blocks, BLOCK, 0, stream>>>(w, k);
      else
        short_kernel<S::W, S::CPL, VEC, U, false><<<blocks, BLOCK, 0, stream>>>(w, k);
    };
    if (w.short_width == 4 || S::U < 2)
      go(bwd_ic<S::U>());
    else
      go(bwd_ic<2>());
  });
  GPU_TRY(cudaGetLastError());
  return tbe_ok();
}
