/* backward_short.cu: the short-run path of the GPU backward: one group of lanes owns one run
 * (SL < threshold) from start to end: it sums the run's gradient rows, applies the optimizer and
 * stores the row with plain stores, no atomics. Twin of ref/backward_short.c; not long runs.
 *
 * Accumulation order: the run's entries one at a time in sorted order from +0 (bwd_sum), then
 * the optimizer (optimizer.cuh). Each run is owned by one group, so the bits do not depend on
 * the order of the short list (the classification fills it with atomics).
 * Buckets: a launch per next_pow2(D) bucket, groups of W = min(next_pow2(D), 32) lanes with CPL
 * columns per lane; with bucketing off every short run goes through the widest table's bucket.
 */
#include <algorithm>

#include "backward_impl.cuh"
#include "cuda_check.h"

namespace {

const int BLOCK = 128;

template <int W, int CPL> __global__ void __launch_bounds__(BLOCK) short_kernel(dev_bwd w, int k)
{
  const int lane = threadIdx.x % W;
  const unsigned mask = bwd_group_mask<W>();
  const int64_t n = w.counts->shorts[k];
  const bwd_run *list = w.shorts + w.short_base[k];
  const int64_t groups = (int64_t)gridDim.x * (BLOCK / W);
  for (int64_t i = (int64_t)blockIdx.x * (BLOCK / W) + threadIdx.x / W; i < n; i += groups) {
    const bwd_run r = list[i];
    const int32_t D = w.b.D[r.table];
    const int64_t s = w.run_start[r.run], e = s + w.run_len[r.run];
    float g[CPL];
    bwd_sum<W, CPL>(w, s, e, D, g, lane, mask);
    const uint64_t key = bwd_key(w, r.run);
    const int64_t row = (int64_t)(key - (uint64_t)w.rows_cumsum[r.table]);
    dev_update_row<W, CPL>(w.opt, w.weights, w.b.wdtype, bwd_weight_at(w, r.table, row), D,
                           g, w.momentum ? w.momentum + key : nullptr, key, lane, mask);
  }
}

template <int W, int CPL> void launch(const dev_bwd &w, int k, int64_t cap, cudaStream_t stream)
{
  const int64_t want = (cap + BLOCK / W - 1) / (BLOCK / W);
  const unsigned blocks = (unsigned)std::min<int64_t>(want, gpu_bwd_max_blocks());
  short_kernel<W, CPL><<<blocks, BLOCK, 0, stream>>>(w, k);
}

} // namespace

tbe_status gpu_bwd_short(const dev_bwd &w, int k, int64_t cap, cudaStream_t stream)
{
  if (cap == 0)
    return tbe_ok();
  switch (k) {
  case 0: launch<1, 1>(w, k, cap, stream); break;
  case 1: launch<2, 1>(w, k, cap, stream); break;
  case 2: launch<4, 1>(w, k, cap, stream); break;
  case 3: launch<8, 1>(w, k, cap, stream); break;
  case 4: launch<16, 1>(w, k, cap, stream); break;
  case 5: launch<32, 1>(w, k, cap, stream); break;
  case 6: launch<32, 2>(w, k, cap, stream); break;
  case 7: launch<32, 4>(w, k, cap, stream); break;
  case 8: launch<32, 8>(w, k, cap, stream); break;
  case 9: launch<32, 16>(w, k, cap, stream); break;
  case 10: launch<32, 32>(w, k, cap, stream); break;
  default: launch<32, 64>(w, k, cap, stream); break;
  }
  GPU_TRY(cudaGetLastError());
  return tbe_ok();
}
