/* forward_small.cu: the small-table path on the GPU: per bag a histogram of its first 256
 * indices, counts x table on the tensor cores (mma.sync m16n8k16, fp16 in, fp32 accumulate),
 * then the remaining indices one row at a time. Twin of ref/forward_small.c (the model of this
 * order); not the normative forward (forward.cu): it is compared with the exact sum by bound.
 *
 * Accumulation order: for each output column, C = +0; for each 16-row K chunk of the table in
 * order, C = the tensor core's C + counts . rows (each count <= 256 is exact in fp16); then the
 * positions past the first 256 in order with __fadd_rn; MEAN multiplies by fl(1/L).
 * Work split: a block of 4 warps holds the feature's whole table in shared memory (E <= 64,
 * D <= 128); each warp covers 16 bags (the M of the MMA).
 */
#include "cuda_check.h"
#include "forward_small.h"
#include "gpu_internal.h"

namespace {

const int WARPS = 4;
const int BAGS = 16;                    /* bags per warp: the MMA's M */
const int KMAX = REF_SMALL_MAX_E;       /* table rows held, padded to 16 */
const int DMAX = 128;
const int DPAD = DMAX + 8;              /* halves per shared row, offset to spread banks */

struct small_launch {
  int64_t bag0, Bt, table, E, col0;
  int32_t D;
  int32_t fused;
  tbe_bounds_mode mode;
  dev_bounds *state;
};

struct small_smem {
  __half table[KMAX][DPAD];
  int count[WARPS][BAGS][KMAX];
  float tile[WARPS][BAGS][DMAX];
  int64_t start[WARPS][BAGS], end[WARPS][BAGS];
};

template <tbe_itype IT>
__device__ __forceinline__ int64_t load_idx(const void *a, int64_t i)
{
  return IT == TBE_I32 ? (int64_t)((const int32_t *)a)[i] : (int64_t)((const long long *)a)[i];
}

/* Loads index p and, when fused, checks it (only the calling lane touches p). */
template <tbe_itype IT>
__device__ __forceinline__ int64_t small_index(const dev_batch &b, const small_launch &s,
                                               int64_t p, unsigned long long &invalid)
{
  const int64_t idx = load_idx<IT>(b.indices, p);
  return s.fused ? fused_check(b.indices, b.itype, s.mode, s.state, p, idx, s.E, true, invalid)
                 : idx;
}

__device__ __forceinline__ uint32_t pack(__half lo, __half hi)
{
  return (uint32_t)__half_as_ushort(lo) | ((uint32_t)__half_as_ushort(hi) << 16);
}

template <tbe_itype IT>
__global__ void __launch_bounds__(WARPS * 32) small_kernel(dev_batch b, small_launch s)
{
  extern __shared__ __align__(16) unsigned char raw[];
  small_smem &sm = *reinterpret_cast<small_smem *>(raw);
  if (s.mode == TBE_BOUNDS_FATAL && s.state &&
      (s.state->first_bad_bag != ~0ull || (!s.fused && s.state->first_bad_index != ~0ull)))
    return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int K = (int)((s.E + 15) / 16) * 16;
  const __half *W = (const __half *)b.weights + s.table;
  for (int i = threadIdx.x; i < K * s.D; i += blockDim.x) {
    const int r = i / s.D, d = i % s.D;
    sm.table[r][d] = r < s.E ? W[(int64_t)r * s.D + d] : __float2half(0.0f);
  }
  const int64_t bb0 = ((int64_t)blockIdx.x * WARPS + warp) * BAGS;
  int (*count)[KMAX] = sm.count[warp];
  float (*tile)[DMAX] = sm.tile[warp];
  for (int i = lane; i < BAGS * KMAX; i += 32)
    count[i / KMAX][i % KMAX] = 0;
  __syncthreads();

  /* histogram of the first 256 positions of each bag */
  unsigned long long invalid = 0;
  int64_t *start = sm.start[warp], *end = sm.end[warp];
  if (lane < BAGS) {
    const int64_t bb = bb0 + lane;
    start[lane] = bb < s.Bt ? load_idx<IT>(b.offsets, s.bag0 + bb) : 0;
    end[lane] = bb < s.Bt ? load_idx<IT>(b.offsets, s.bag0 + bb + 1) : 0;
  }
  __syncwarp();
  for (int q = 0; q < BAGS; q++) {
    const int64_t h_end = min(end[q], start[q] + REF_SMALL_HIST);
    for (int64_t p = start[q] + lane; p < h_end; p += 32) {
      const int64_t idx = small_index<IT>(b, s, p, invalid);
      if (idx != -1)
        atomicAdd(&count[q][idx], 1);
    }
  }
  __syncwarp();

  /* counts (16 bags x K) times the table (K x D), 16 rows of K at a time */
  const int g = lane >> 2, tig = lane & 3;
  for (int nt = 0; nt < s.D / 8; nt++) {
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 < K; k0 += 16) {
      const int ka = k0 + tig * 2, kb = ka + 8;
      const uint32_t a0 = pack(__int2half_rn(count[g][ka]), __int2half_rn(count[g][ka + 1]));
      const uint32_t a1 =
          pack(__int2half_rn(count[g + 8][ka]), __int2half_rn(count[g + 8][ka + 1]));
      const uint32_t a2 = pack(__int2half_rn(count[g][kb]), __int2half_rn(count[g][kb + 1]));
      const uint32_t a3 =
          pack(__int2half_rn(count[g + 8][kb]), __int2half_rn(count[g + 8][kb + 1]));
      const int n = nt * 8 + g;
      const uint32_t b0 = pack(sm.table[ka][n], sm.table[ka + 1][n]);
      const uint32_t b1 = pack(sm.table[kb][n], sm.table[kb + 1][n]);
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                   "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                   : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                   : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    tile[g][nt * 8 + tig * 2] = c[0];
    tile[g][nt * 8 + tig * 2 + 1] = c[1];
    tile[g + 8][nt * 8 + tig * 2] = c[2];
    tile[g + 8][nt * 8 + tig * 2 + 1] = c[3];
  }
  __syncwarp();

  /* the rest of each bag, one row at a time (lane 0 checks it first); MEAN; the store */
  for (int q = 0; q < BAGS && bb0 + q < s.Bt; q++) {
    const int64_t tail = start[q] + REF_SMALL_HIST;
    if (s.fused && lane == 0)
      for (int64_t p = tail; p < end[q]; p++)
        small_index<IT>(b, s, p, invalid);
    __syncwarp();
    const int64_t L = end[q] - start[q];
    for (int d = lane; d < s.D; d += 32) {
      float v = tile[q][d];
      for (int64_t p = tail; p < end[q]; p++) {
        const int64_t idx = load_idx<IT>(b.indices, p);
        if (idx != -1) /* FATAL leaves invalid indices in place: read row 0, output discarded */
          v = __fadd_rn(v, __half2float(sm.table[idx >= 0 && idx < s.E ? idx : 0][d]));
      }
      if (b.pool == TBE_POOL_MEAN && L > 0)
        v = __fmul_rn(v, __fdiv_rn(1.0f, __ll2float_rn(L)));
      ((float *)b.out)[(bb0 + q) * b.total_D + s.col0 + d] = v;
    }
  }
  if (s.state) {
    for (int o = 16; o > 0; o >>= 1)
      invalid += __shfl_xor_sync(0xffffffffu, invalid, o);
    if (lane == 0 && invalid)
      atomicAdd(&s.state->counter, invalid);
  }
}

} // namespace

tbe_status gpu_forward_small(const dev_batch &b, const small_feature *f, int n, int fused,
                             tbe_bounds_mode mode, dev_bounds *d_state, cudaStream_t stream)
{
  const size_t smem = sizeof(small_smem);
  static bool configured = false;
  if (!configured) {
    GPU_TRY(cudaFuncSetAttribute(small_kernel<TBE_I32>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    GPU_TRY(cudaFuncSetAttribute(small_kernel<TBE_I64>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    configured = true;
  }
  for (int i = 0; i < n; i++) {
    small_launch s = {f[i].bag0, f[i].Bt, f[i].table, f[i].E, f[i].col0, f[i].D, fused, mode,
                      fused || mode == TBE_BOUNDS_FATAL ? d_state : nullptr};
    const unsigned blocks = (unsigned)((s.Bt + WARPS * BAGS - 1) / (WARPS * BAGS));
    if (blocks == 0)
      continue;
    if (b.itype == TBE_I32)
      small_kernel<TBE_I32><<<blocks, WARPS * 32, smem, stream>>>(b, s);
    else
      small_kernel<TBE_I64><<<blocks, WARPS * 32, smem, stream>>>(b, s);
    GPU_TRY(cudaGetLastError());
  }
  return tbe_ok();
}
