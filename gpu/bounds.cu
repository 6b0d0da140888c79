/* bounds.cu: the bounds check of TBE_SEMANTICS.md section 2 on the GPU (offsets judged and
 * repaired as a prefix max with CUB, indices checked and repaired), and the offsets half that the
 * fused forward runs first. Twin of ref/bounds.c; not the fused index check (forward.cu).
 *
 * Determinism: the repaired arrays are a pure function of the inputs (the prefix max is exact
 * integer arithmetic, each index is written by one thread); the counter is an integer sum of
 * atomics; FATAL's offender is an atomicMin over bag and position numbers, named (feature, bag,
 * position, value) by offender_kernel from the device's inputs. So every output equals the
 * reference's, run to run.
 */
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "cuda_check.h"
#include "dev_batch.cuh"
#include "gpu_internal.h"

/* Judges every bag on the original offsets (the last bag's end taken as N) and the last offset. */
__global__ void check_offsets_kernel(dev_batch b, dev_bounds *s)
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
}

/* c[i] = min(o[i], N), and c[0] also clamped at 0: the running clamp is the prefix max of c. */
struct clamp_offset {
  const void *o;
  tbe_itype itype;
  int64_t N;
  __device__ int64_t operator()(int64_t i) const
  {
    int64_t v = ld_index_rw(o, itype, i);
    v = v < N ? v : N;
    return i == 0 && v < 0 ? 0 : v;
  }
};

struct max_op {
  __host__ __device__ int64_t operator()(int64_t a, int64_t b) const { return a > b ? a : b; }
};

/* Writes the repaired offsets back in the index dtype, and o'[total_B] = N. */
__global__ void store_offsets_kernel(dev_batch b, const int64_t *repaired)
{
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < b.total_B)
    st_index(b.offsets, b.itype, i, repaired[i]);
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
  const int threads = 256;
  unsigned blocks = (unsigned)((b.total_B + 1 + threads - 1) / threads);
  check_offsets_kernel<<<blocks, threads, 0, stream>>>(b, d_state);
  GPU_TRY(cudaGetLastError());
  if (mode == TBE_BOUNDS_FATAL)
    return tbe_ok();
  /* repair: prefix max of the clamped offsets (the identity on valid offsets) */
  auto in = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0),
                                            clamp_offset{b.offsets, b.itype, b.N});
  int64_t *repaired;
  tbe_status st = gpu_scratch_get(scratch, 0, sizeof(int64_t) * (size_t)(b.total_B + 1),
                                  (void **)&repaired);
  if (st.code != TBE_OK)
    return st;
  size_t temp_bytes = 0;
  GPU_TRY(cub::DeviceScan::InclusiveScan(nullptr, temp_bytes, in, repaired, max_op(),
                                         (int)b.total_B, stream));
  void *temp;
  if ((st = gpu_scratch_get(scratch, 1, temp_bytes, &temp)).code != TBE_OK)
    return st;
  if (b.total_B > 0)
    GPU_TRY(cub::DeviceScan::InclusiveScan(temp, temp_bytes, in, repaired, max_op(),
                                           (int)b.total_B, stream));
  store_offsets_kernel<<<blocks, threads, 0, stream>>>(b, repaired);
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
