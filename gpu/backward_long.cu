/* backward_long.cu: the long-run path of the GPU backward (SL >= threshold): chunk programs of
 * `chunk` entries each sum their part of a run; the partials are combined and the optimizer
 * applied either by a second kernel (accum) or, in the same launch, by the chunk program that
 * counts the run's last chunk down (fused: partial, __threadfence, atomic countdown). Twin of
 * ref/backward_long.c; not short runs (backward_short.cu).
 *
 * Accumulation order: each chunk from +0 in sorted order (bwd_sum). Deterministic combine: one
 * partial slot per chunk, added in ascending chunk order starting from the first partial, by one
 * group, so bit-exact whatever order the chunks ran in. Atomic combine: atomicAdd of every
 * partial into one zeroed row per run, in whatever order the chunks arrive (checked by the
 * bound of ref/backward_exact.c). Long runs of every table go through the widest table's group
 * configuration (they are few; bucketing is for short runs).
 */
#include <algorithm>

#include "backward_impl.cuh"
#include "cuda_check.h"

namespace {

const int BLOCK = 128;

/* Chunk programs of each long run, its countdown and (atomic) its zeroed accumulator row. */
__global__ void expand_kernel(dev_bwd w)
{
  const int64_t n = w.counts->longs;
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const bwd_long L = w.longs[i];
    for (int32_t c = threadIdx.x; c < L.chunks; c += blockDim.x)
      w.chunks[L.chunk0 + c] = {(int32_t)i, c};
    if (w.atomic)
      for (int32_t d = threadIdx.x; d < w.max_D; d += blockDim.x)
        w.part[i * w.max_D + d] = 0.0f;
    if (threadIdx.x == 0)
      w.countdown[i] = L.chunks;
  }
}

/* Long run i's row gradient from its partials, then its optimizer step (one group). */
template <int W, int CPL>
__device__ void apply_run(const dev_bwd &w, int64_t i, int lane, unsigned mask)
{
  const bwd_long L = w.longs[i];
  const int32_t D = w.b.D[L.table];
  float g[CPL];
#pragma unroll
  for (int c = 0; c < CPL; c++) {
    const int d = lane + W * c;
    if (d >= D)
      continue;
    if (w.atomic) {
      g[c] = __ldcg(w.part + i * w.max_D + d);
    } else {
      g[c] = __ldcg(w.part + (int64_t)L.chunk0 * w.max_D + d);
      for (int32_t k = 1; k < L.chunks; k++)
        g[c] = __fadd_rn(g[c], __ldcg(w.part + (int64_t)(L.chunk0 + k) * w.max_D + d));
    }
  }
  const uint64_t key = bwd_key(w, L.run);
  const int64_t row = (int64_t)(key - (uint64_t)w.rows_cumsum[L.table]);
  dev_update_row<W, CPL>(w.opt, w.weights, w.b.wdtype, bwd_weight_at(w, L.table, row), D, g,
                         w.momentum ? w.momentum + key : nullptr, key, lane, mask);
}

template <int W, int CPL> __global__ void __launch_bounds__(BLOCK) chunk_kernel(dev_bwd w, int fused)
{
  const int lane = threadIdx.x % W;
  const unsigned mask = bwd_group_mask<W>();
  const int64_t n = w.counts->chunks;
  const int64_t groups = (int64_t)gridDim.x * (BLOCK / W);
  for (int64_t q = (int64_t)blockIdx.x * (BLOCK / W) + threadIdx.x / W; q < n; q += groups) {
    const bwd_chunk ch = w.chunks[q];
    const bwd_long L = w.longs[ch.lrun];
    const int32_t D = w.b.D[L.table];
    const int64_t s0 = w.run_start[L.run], e0 = s0 + w.run_len[L.run];
    const int64_t s = s0 + (int64_t)ch.chunk * w.chunk, e = min(e0, s + (int64_t)w.chunk);
    float acc[CPL];
    bwd_sum<W, CPL>(w, s, e, D, acc, lane, mask);
#pragma unroll
    for (int c = 0; c < CPL; c++) {
      const int d = lane + W * c;
      if (d >= D)
        continue;
      if (w.atomic)
        atomicAdd(w.part + (int64_t)ch.lrun * w.max_D + d, acc[c]);
      else
        w.part[q * w.max_D + d] = acc[c];
    }
    if (!fused)
      continue;
    __threadfence();
    __syncwarp(mask);
    int last = 0;
    if (lane == 0)
      last = atomicSub(w.countdown + ch.lrun, 1) == 1;
    last = __shfl_sync(mask, last, 0, W);
    if (last) {
      __threadfence();
      apply_run<W, CPL>(w, ch.lrun, lane, mask);
    }
  }
}

template <int W, int CPL> __global__ void __launch_bounds__(BLOCK) apply_kernel(dev_bwd w)
{
  const int lane = threadIdx.x % W;
  const unsigned mask = bwd_group_mask<W>();
  const int64_t n = w.counts->longs;
  const int64_t groups = (int64_t)gridDim.x * (BLOCK / W);
  for (int64_t i = (int64_t)blockIdx.x * (BLOCK / W) + threadIdx.x / W; i < n; i += groups)
    apply_run<W, CPL>(w, i, lane, mask);
}

template <int W, int CPL> void launch(const dev_bwd &w, int fused, cudaStream_t stream)
{
  const int per = BLOCK / W;
  const int64_t cap = gpu_bwd_max_blocks();
  const unsigned cblocks = (unsigned)std::min<int64_t>((w.chunk_cap + per - 1) / per, cap);
  chunk_kernel<W, CPL><<<std::max(cblocks, 1u), BLOCK, 0, stream>>>(w, fused);
  if (!fused) {
    const unsigned ablocks = (unsigned)std::min<int64_t>((w.long_cap + per - 1) / per, cap);
    apply_kernel<W, CPL><<<std::max(ablocks, 1u), BLOCK, 0, stream>>>(w);
  }
}

} // namespace

/* The widest table's bucket k decides the group configuration of every long run. */
tbe_status gpu_bwd_long(const dev_bwd &w, int fused, cudaStream_t stream)
{
  if (w.long_cap == 0)
    return tbe_ok();
  const unsigned eblocks = (unsigned)std::min<int64_t>(w.long_cap, gpu_bwd_max_blocks());
  expand_kernel<<<eblocks, BLOCK, 0, stream>>>(w);
  GPU_TRY(cudaGetLastError());
  int k = 0;
  while ((1 << k) < w.max_D)
    k++;
  switch (k) {
  case 0: launch<1, 1>(w, fused, stream); break;
  case 1: launch<2, 1>(w, fused, stream); break;
  case 2: launch<4, 1>(w, fused, stream); break;
  case 3: launch<8, 1>(w, fused, stream); break;
  case 4: launch<16, 1>(w, fused, stream); break;
  case 5: launch<32, 1>(w, fused, stream); break;
  case 6: launch<32, 2>(w, fused, stream); break;
  case 7: launch<32, 4>(w, fused, stream); break;
  case 8: launch<32, 8>(w, fused, stream); break;
  case 9: launch<32, 16>(w, fused, stream); break;
  case 10: launch<32, 32>(w, fused, stream); break;
  default: launch<32, 64>(w, fused, stream); break;
  }
  GPU_TRY(cudaGetLastError());
  return tbe_ok();
}
