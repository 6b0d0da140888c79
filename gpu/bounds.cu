/* bounds.cu: the bounds check of TBE_SEMANTICS.md section 2 on the GPU (offsets judged and
 * repaired as a prefix max, indices checked and repaired), and the offsets half that the fused
 * forward runs first. Twin of ref/bounds.c; not the fused index check (forward.cu).
 *
 * Determinism: the repaired arrays are a pure function of the inputs (the prefix max is exact
 * integer arithmetic, each index is written by one thread); the counter is an integer sum of
 * atomics; FATAL's offender is an atomicMin over bag and position numbers, named (feature, bag,
 * position, value) by offender_kernel from the device's inputs. So every output equals the
 * reference's, run to run.
 */
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "cuda_check.h"
#include "dev_batch.cuh"
#include "gpu_internal.h"

/* The offsets pass runs in blocks of OFFSET_THREADS offsets. Its repair, the prefix max of the
 * clamped offsets c (c[i] = min(o[i], N), c[0] also clamped at 0), is the identity when no bag
 * and not the last offset is bad: then o[0] >= 0, o is nondecreasing, o[total_B - 1] <= N and
 * o[total_B] = N, so c = o and its prefix max is o. So the two repair kernels return at once
 * when the check found nothing (first_bad_bag is ~0, as the caller set it), and the common case
 * costs one pass over the offsets. */
constexpr int OFFSET_THREADS = 256;
constexpr int PREFIX_THREADS = 1024;

struct max_op {
  __host__ __device__ int64_t operator()(int64_t a, int64_t b) const { return a > b ? a : b; }
};

__device__ __forceinline__ int64_t clamped_offset(const dev_batch &b, int64_t i)
{
  int64_t v = ld_index_rw(b.offsets, b.itype, i);
  v = v < b.N ? v : b.N;
  return i == 0 && v < 0 ? 0 : v;
}

/* Judges every bag on the original offsets (the last bag's end taken as N) and the last offset;
 * outside FATAL (block_max set) also leaves each block's max of c in block_max. */
__global__ void check_offsets_kernel(dev_batch b, dev_bounds *s, int64_t *block_max)
{
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int bad = 0;
  if (i < b.total_B) {
    int64_t start = ld_index(b.offsets, b.itype, i);
    int64_t end = i == b.total_B - 1 ? b.N : ld_index(b.offsets, b.itype, i + 1);
    bad = start < 0 || start > end || end > b.N;
  } else if (i == b.total_B) {
    bad = ld_index(b.offsets, b.itype, i) != b.N;
  }
  if (bad)
    atomicMin(&s->first_bad_bag, (unsigned long long)i);
  unsigned n = __popc(__ballot_sync(0xffffffffu, bad));
  if (n && (threadIdx.x & 31) == 0)
    atomicAdd(&s->counter, (unsigned long long)n);
  if (block_max) {
    typedef cub::BlockReduce<int64_t, OFFSET_THREADS> reduce;
    __shared__ typename reduce::TempStorage tmp;
    const int64_t m = reduce(tmp).Reduce(i < b.total_B ? clamped_offset(b, i) : INT64_MIN,
                                         max_op());
    if (threadIdx.x == 0)
      block_max[blockIdx.x] = m;
  }
}

/* One block, when a bad offset was found: block_max[k] becomes the max of c over the blocks
 * before k (INT64_MIN for block 0), an exclusive prefix max in chunks of PREFIX_THREADS. */
__global__ void __launch_bounds__(PREFIX_THREADS)
    offsets_prefix_kernel(const dev_bounds *s, int64_t *block_max, int64_t blocks)
{
  if (s->first_bad_bag == ~0ull)
    return;
  typedef cub::BlockScan<int64_t, PREFIX_THREADS> scan;
  __shared__ typename scan::TempStorage tmp;
  int64_t carry = INT64_MIN;
  for (int64_t k0 = 0; k0 < blocks; k0 += PREFIX_THREADS) {
    const int64_t k = k0 + threadIdx.x;
    const int64_t v = k < blocks ? block_max[k] : INT64_MIN;
    int64_t before, all;
    scan(tmp).ExclusiveScan(v, before, carry, max_op(), all);
    if (k < blocks)
      block_max[k] = before;
    carry = max_op()(carry, all);
    __syncthreads(); /* tmp is reused by the next chunk */
  }
}

/* When a bad offset was found: o'[i] = max(prefix of the blocks before, the block's inclusive
 * prefix max of c up to i), stored in the index dtype, and o'[total_B] = N. Each block reads and
 * writes only its own offsets, so the repair is in place. */
__global__ void store_offsets_kernel(dev_batch b, const dev_bounds *s, const int64_t *prefix)
{
  if (s->first_bad_bag == ~0ull)
    return;
  typedef cub::BlockScan<int64_t, OFFSET_THREADS> scan;
  __shared__ typename scan::TempStorage tmp;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t v = i < b.total_B ? clamped_offset(b, i) : INT64_MIN;
  scan(tmp).InclusiveScan(v, v, max_op());
  v = max_op()(v, prefix[blockIdx.x]);
  if (i < b.total_B)
    st_index(b.offsets, b.itype, i, v);
  else if (i == b.total_B)
    st_index(b.offsets, b.itype, i, b.N);
}

/* One warp per bag: its indices against E of the bag's table. */
__global__ void check_indices_kernel(dev_batch b, dev_bounds *s, int repair)
{
  int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x & 31;
  if (bag >= b.total_B)
    return;
  if (!repair && s->first_bad_bag != ~0ull) /* FATAL with bad offsets: ranges are garbage */
    return;
  int32_t t = bag_feature(b.B_offsets, b.T, bag);
  int64_t E = b.E[b.ftm[t]];
  int64_t start = ld_index_rw(b.offsets, b.itype, bag);
  int64_t end = ld_index_rw(b.offsets, b.itype, bag + 1);
  unsigned long long invalid = 0;
  for (int64_t p = start + lane; p < end; p += 32) {
    int64_t idx = ld_index_rw(b.indices, b.itype, p);
    if (idx == -1 || (idx >= 0 && idx < E))
      continue;
    invalid++;
    if (repair)
      st_index(b.indices, b.itype, p, 0);
    else
      atomicMin(&s->first_bad_index, (unsigned long long)p);
  }
  for (int o = 16; o > 0; o >>= 1)
    invalid += __shfl_xor_sync(0xffffffffu, invalid, o);
  if (lane == 0 && invalid)
    atomicAdd(&s->counter, invalid);
}

/* One thread: FATAL's first offender named from the device's own state and inputs (FATAL
 * repairs nothing, so the offsets and indices are the originals): an offset offender is (the
 * bag's feature, or -1 for the last offset; the bag; position = the bag; its start offset), an
 * index offender (feature, the last bag whose start <= p, p, the index). */
__global__ void offender_kernel(dev_batch b, const dev_bounds *s, dev_offender *o)
{
  dev_offender r = {0, 0, 0, 0, 0};
  if (s->first_bad_bag != ~0ull) {
    const int64_t bag = (int64_t)s->first_bad_bag;
    r.kind = 1;
    r.feature = bag == b.total_B ? -1 : bag_feature(b.B_offsets, b.T, bag);
    r.bag = bag;
    r.position = bag;
    r.value = ld_index_rw(b.offsets, b.itype, bag);
  } else if (s->first_bad_index != ~0ull) {
    const int64_t p = (int64_t)s->first_bad_index;
    int64_t lo = 0, hi = b.total_B - 1; /* the offsets are valid: an index is the offender */
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (ld_index_rw(b.offsets, b.itype, mid) <= p)
        lo = mid;
      else
        hi = mid - 1;
    }
    r.kind = 2;
    r.feature = bag_feature(b.B_offsets, b.T, lo);
    r.bag = lo;
    r.position = p;
    r.value = ld_index_rw(b.indices, b.itype, p);
  }
  *o = r;
}

tbe_status gpu_bounds_offender(const dev_batch &b, const dev_bounds *d_state,
                               dev_offender *d_offender, cudaStream_t stream)
{
  offender_kernel<<<1, 1, 0, stream>>>(b, d_state, d_offender);
  GPU_TRY(cudaGetLastError());
  return tbe_ok();
}

tbe_status gpu_bounds_offsets(const dev_batch &b, dev_bounds *d_state, tbe_bounds_mode mode,
                              gpu_scratch *scratch, cudaStream_t stream)
{
  const int64_t blocks = (b.total_B + 1 + OFFSET_THREADS - 1) / OFFSET_THREADS;
  if (mode == TBE_BOUNDS_FATAL) {
    check_offsets_kernel<<<(unsigned)blocks, OFFSET_THREADS, 0, stream>>>(b, d_state, nullptr);
    GPU_TRY(cudaGetLastError());
    return tbe_ok();
  }
  int64_t *block_max;
  tbe_status st = gpu_scratch_get(scratch, 0, sizeof(int64_t) * (size_t)blocks,
                                  (void **)&block_max);
  if (st.code != TBE_OK)
    return st;
  check_offsets_kernel<<<(unsigned)blocks, OFFSET_THREADS, 0, stream>>>(b, d_state, block_max);
  GPU_TRY(cudaGetLastError());
  offsets_prefix_kernel<<<1, PREFIX_THREADS, 0, stream>>>(d_state, block_max, blocks);
  GPU_TRY(cudaGetLastError());
  store_offsets_kernel<<<(unsigned)blocks, OFFSET_THREADS, 0, stream>>>(b, d_state, block_max);
  GPU_TRY(cudaGetLastError());
  return tbe_ok();
}

tbe_status gpu_bounds_indices(const dev_batch &b, dev_bounds *d_state, tbe_bounds_mode mode,
                              cudaStream_t stream)
{
  if (b.total_B == 0)
    return tbe_ok();
  const int threads = 256;
  unsigned blocks = (unsigned)((b.total_B * 32 + threads - 1) / threads);
  check_indices_kernel<<<blocks, threads, 0, stream>>>(b, d_state, mode != TBE_BOUNDS_FATAL);
  GPU_TRY(cudaGetLastError());
  return tbe_ok();
}
