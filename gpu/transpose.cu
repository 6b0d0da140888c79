/* transpose.cu: the GPU backward's transpose: every lookup's linear key (its table's first key
 * plus the row), a stable CUB radix sort of (key, position) over the key's significant bits,
 * CUB run-length encode and exclusive scan into runs. Twin of ref/transpose.c; not the sums.
 *
 * Order: radix sort is stable and positions enter in increasing order, so within a key the
 * entries keep position order (feature, bag, position), as the spec and ref_transpose have it.
 * A -1 position, a position outside every bag, every position of a table that bwd.small_tc takes
 * in this call (backward_small.cu updates its rows) and every position of a call stopped by a
 * FATAL bounds check get the sentinel key (the total row count): they sort after every real key and
 * form at most one run, which the classification skips.
 */
#include <algorithm>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include "backward_impl.cuh"
#include "cuda_check.h"

namespace {

/* Position p's entry: its key (the sentinel for a -1 index or a table bwd.small_tc takes),
 * its sorted value (bag or position, val_bag) and, when weighted, its bag. */
template <typename K>
__device__ __forceinline__ void keys_put(const dev_bwd &w, K *keys, int32_t *pos, int64_t p,
                                         int64_t bag, int64_t base, bool small)
{
  const int64_t idx = ld_index(w.b.indices, w.b.itype, p);
  keys[p] = (K)(idx == -1 || small ? w.sentinel : base + idx);
  pos[p] = (int32_t)(w.val_bag ? bag : p);
  if (w.bag_of_pos)
    w.bag_of_pos[p] = (int32_t)bag;
}

/* Position p with no bag (before the first, or every one of a call a FATAL check stopped). */
template <typename K>
__device__ __forceinline__ void keys_none(const dev_bwd &w, K *keys, int32_t *pos, int64_t p)
{
  keys[p] = (K)w.sentinel;
  pos[p] = (int32_t)p;
  if (w.bag_of_pos)
    w.bag_of_pos[p] = -1;
}

/* A tile of 32 consecutive bags, lane j's bag i0 + j: its first position (a lane past the
 * last bag: INT32_MAX, beyond every position), its table's first key and whether bwd.small_tc
 * takes it. */
struct keys_tile {
  int32_t first;
  int64_t base;
  bool small;
};

__device__ __forceinline__ keys_tile keys_tile_load(const dev_bwd &w, int64_t i0, int lane)
{
  const dev_batch &b = w.b;
  const int64_t i = i0 + lane;
  if (i >= b.total_B)
    return {INT32_MAX, 0, false};
  const int32_t t = bag_feature(b.B_offsets, b.T, i);
  const int32_t j = b.ftm[t];
  return {(int32_t)ld_index(b.offsets, b.itype, i), w.rows_cumsum[j], w.tc_ok && w.tc_ok[j]};
}

/* Keys, the sort's values (bags or positions) and, when weighted, the bag of each position.
 * A warp takes 32 bags at a time and their positions 32 at a time, each lane finding its
 * position's bag among the tile's by bwd_tile_lane: every lane busy whatever the bags'
 * lengths, and a bag's table looked up once per tile, not once per position. Positions are
 * below 2^31 (int32). */
template <typename K> __global__ void keys_kernel(dev_bwd w, const dev_bounds *state, K *keys, int32_t *pos)
{
  const dev_batch &b = w.b;
  const int lane = threadIdx.x & 31;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
  const bool stop = state && (state->first_bad_bag != ~0ull || state->first_bad_index != ~0ull);
  if (stop) {
    for (int64_t p = warp * 32 + lane; p < b.N; p += warps * 32)
      keys_none(w, keys, pos, p);
    return;
  }
  if (warp == 0) /* positions before the first bag */
    for (int64_t p = lane; p < ld_index(b.offsets, b.itype, 0); p += 32)
      keys_none(w, keys, pos, p);
  for (int64_t i0 = warp * 32; i0 < b.total_B; i0 += warps * 32) {
    const keys_tile tile = keys_tile_load(w, i0, lane);
    const int64_t last = min(i0 + 32, b.total_B);
    const int32_t s = __shfl_sync(0xffffffffu, tile.first, 0);
    const int32_t e = (int32_t)ld_index(b.offsets, b.itype, last);
    for (int64_t p0 = s; p0 < e; p0 += 32) { /* int64: e may lie within 32 of 2^31 */
      const int64_t p = p0 + lane;
      const int j =
          bwd_tile_lane([&](int l) { return __shfl_sync(0xffffffffu, tile.first, l); }, p);
      const int64_t base = __shfl_sync(0xffffffffu, tile.base, j);
      const bool small = __shfl_sync(0xffffffffu, tile.small, j);
      if (p < e)
        keys_put(w, keys, pos, p, i0 + j, base, small);
    }
  }
}

} // namespace

template <typename K>
tbe_status gpu_transpose_bytes(int64_t N, int end_bit, size_t *bytes)
{
  size_t sort = 0, rle = 0, scan = 0;
  cub::DoubleBuffer<K> k(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> v(nullptr, nullptr);
  GPU_TRY(cub::DeviceRadixSort::SortPairs(nullptr, sort, k, v, (int)N, 0, end_bit));
  GPU_TRY(cub::DeviceRunLengthEncode::Encode(nullptr, rle, (const K *)nullptr, (K *)nullptr,
                                             (int32_t *)nullptr, (int *)nullptr, (int)N));
  GPU_TRY(cub::DeviceScan::ExclusiveSum(nullptr, scan, (const int32_t *)nullptr,
                                        (int32_t *)nullptr, (int)N));
  *bytes = std::max(sort, std::max(rle, scan));
  return tbe_ok();
}

template <typename K>
tbe_status gpu_transpose(dev_bwd &w, const gpu_transpose_bufs &t, const dev_bounds *state,
                         cudaStream_t stream)
{
  const int64_t N = w.b.N;
  const unsigned blocks =
      (unsigned)std::min<int64_t>((w.b.total_B + 127) / 128 + 1, gpu_bwd_max_blocks());
  keys_kernel<K><<<blocks, 128, 0, stream>>>(w, state, (K *)t.keys[0], t.pos[0]);
  GPU_TRY(cudaGetLastError());
  cub::DoubleBuffer<K> k((K *)t.keys[0], (K *)t.keys[1]);
  cub::DoubleBuffer<int32_t> v(t.pos[0], t.pos[1]);
  size_t bytes = t.temp_bytes;
  GPU_TRY(cub::DeviceRadixSort::SortPairs(t.temp, bytes, k, v, (int)N, 0, t.end_bit, stream));
  w.pos = v.Current();
  bytes = t.temp_bytes;
  GPU_TRY(cub::DeviceRunLengthEncode::Encode(t.temp, bytes, k.Current(), (K *)t.run_key,
                                             t.run_len, &w.counts->num_runs, (int)N, stream));
  bytes = t.temp_bytes;
  GPU_TRY(cub::DeviceScan::ExclusiveSum(t.temp, bytes, t.run_len, t.run_start, (int)N, stream));
  w.run_key = t.run_key;
  w.run_len = t.run_len;
  w.run_start = t.run_start;
  return tbe_ok();
}

template tbe_status gpu_transpose_bytes<uint32_t>(int64_t, int, size_t *);
template tbe_status gpu_transpose_bytes<uint64_t>(int64_t, int, size_t *);
template tbe_status gpu_transpose<uint32_t>(dev_bwd &, const gpu_transpose_bufs &,
                                            const dev_bounds *, cudaStream_t);
template tbe_status gpu_transpose<uint64_t>(dev_bwd &, const gpu_transpose_bufs &,
                                            const dev_bounds *, cudaStream_t);
