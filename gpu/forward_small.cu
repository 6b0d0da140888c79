/* forward_small.cu: the small-table path on the GPU: per bag a histogram of its first 256
 * indices, counts x table on the tensor cores (mma.sync m16n8k16, fp16 in, fp32 accumulate),
 * then the remaining indices one row at a time. Twin of ref/forward_small.c (the model of this
 * order); not the normative forward (forward.cu): it is compared with the exact sum by bound.
 *
 * Accumulation order: for each output column, C = +0; for each 16-row K chunk of the table in
 * order, C = the tensor core's C + counts . rows (each count <= 256 is exact in fp16); then the
 * positions past the first 256 in order with __fadd_rn; MEAN multiplies by fl(1/L).
 * Work split: a block of 8 warps holds the feature's whole table in shared memory (E <= 64,
 * D <= 128), transposed so that a B fragment is one 32-bit load; each warp covers 16 bags (the
 * M of the MMA), keeps their counts as A fragments in registers for every column tile, and
 * finishes its accumulators (tail, MEAN, store) where the MMA leaves them, without staging.
 * With bwd.small_tc, each warp also stores its bags' counts (the fp16 A values) for the
 * backward (gpu/backward_small.cu), after the histogram and before the MMA.
 */
#include "cuda_check.h"
#include "forward_small.h"
#include "gpu_internal.h"

namespace {

/* policy: 8 warps a block, so a block's table load serves 128 bags and the shared memory
 * (table, counts) leaves several blocks resident per SM */
const int WARPS = 8;
const int BAGS = 16;                    /* bags per warp: the MMA's M */
const int KMAX = REF_SMALL_MAX_E;       /* table rows held, padded to 16 */
const int KC = KMAX / REF_SMALL_K;      /* K chunks at most */
const int DMAX = 128;
const int KPAD = KMAX + 8;              /* halves per transposed row: 36 words, so the 32 lanes'
                                           B fragment loads (column 4g + tig) hit 32 banks */
const int HIST_STEPS = REF_SMALL_HIST / 32; /* histogram positions per lane and bag */

struct small_launch {
  int64_t bag0, Bt, table, E, col0;
  int32_t D;
  int32_t fused;
  tbe_bounds_mode mode;
  dev_bounds *state;
  __half *counts; /* bwd.small_tc: this feature's bag 0's row of saved counts, else NULL */
};

struct small_smem {
  __half table[DMAX][KPAD]; /* [column][row], rows E..K-1 zero */
  int count[WARPS][BAGS][KMAX];
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

/* ---- the block's table, transposed, rows E..K-1 zero ---- */
__device__ __forceinline__ void small_table(small_smem &sm, const __half *W, int64_t E, int D,
                                            int K)
{
  for (int i = threadIdx.x; i < K * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    sm.table[d][r] = r < E ? W[(int64_t)r * D + d] : __float2half(0.0f);
  }
}

/* ---- a warp's histograms: its 16 bags' first 256 positions, then the check of the rest ----
 * A lane loads all its positions of a bag before it counts any, so its loads are in flight
 * together; the counts are the same in any order (integer atomics). The positions past 256 are
 * checked (and repaired) here, before any lane reads them for the tail. */
template <tbe_itype IT>
__device__ __forceinline__ void small_histogram(const dev_batch &b, const small_launch &s,
                                                int (*count)[KMAX], const int64_t *start,
                                                const int64_t *end, int lane,
                                                unsigned long long &invalid)
{
  for (int q = 0; q < BAGS; q++) {
    const int64_t h_end = min(end[q], start[q] + REF_SMALL_HIST);
    int64_t idx[HIST_STEPS];
#pragma unroll
    for (int j = 0; j < HIST_STEPS; j++) {
      const int64_t p = start[q] + lane + 32 * j;
      idx[j] = p < h_end ? small_index<IT>(b, s, p, invalid) : -1;
    }
#pragma unroll
    for (int j = 0; j < HIST_STEPS; j++)
      if (idx[j] != -1)
        atomicAdd(&count[q][idx[j]], 1);
  }
  if (s.fused)
    for (int q = 0; q < BAGS; q++)
      for (int64_t p = start[q] + REF_SMALL_HIST + lane; p < end[q]; p += 32)
        small_index<IT>(b, s, p, invalid);
}

/* ---- bwd.small_tc: the warp's 16 bags' counts as the A operand's fp16 values, KMAX per bag
 * (rows E..K-1 zero), for the backward (each count <= 256: exact) ---- */
__device__ __forceinline__ void small_save(const small_launch &s, int (*count)[KMAX], int64_t bb0,
                                           int lane)
{
  for (int i = lane; i < BAGS * KMAX; i += 32) {
    const int q = i / KMAX, r = i % KMAX;
    if (bb0 + q < s.Bt)
      s.counts[(bb0 + q) * KMAX + r] = __int2half_rn(count[q][r]);
  }
}

/* ---- the counts as the MMA's A fragments (16 bags x K), one set for every column tile ---- */
__device__ __forceinline__ void small_fragments(uint32_t (&a)[KC][4], int (*count)[KMAX], int K,
                                                int g, int tig)
{
#pragma unroll
  for (int kc = 0; kc < KC; kc++) {
    const int ka = kc * REF_SMALL_K + tig * 2, kb = ka + 8;
    if (kc * REF_SMALL_K >= K)
      break;
    a[kc][0] = pack(__int2half_rn(count[g][ka]), __int2half_rn(count[g][ka + 1]));
    a[kc][1] = pack(__int2half_rn(count[g + 8][ka]), __int2half_rn(count[g + 8][ka + 1]));
    a[kc][2] = pack(__int2half_rn(count[g][kb]), __int2half_rn(count[g][kb + 1]));
    a[kc][3] = pack(__int2half_rn(count[g + 8][kb]), __int2half_rn(count[g + 8][kb + 1]));
  }
}

/* ---- one accumulator pair: bag q's columns n, n+1 after the MMA: its positions past the
 * first 256 in order, MEAN, the store ---- */
template <tbe_itype IT>
__device__ __forceinline__ void small_finish(const dev_batch &b, const small_launch &s,
                                             const small_smem &sm, int64_t bag, int64_t st,
                                             int64_t en, int n, float v0, float v1)
{
  if (bag >= s.Bt)
    return;
  for (int64_t p = st + REF_SMALL_HIST; p < en; p++) {
    const int64_t idx = load_idx<IT>(b.indices, p);
    if (idx != -1) { /* FATAL leaves invalid indices in place: read row 0, output discarded */
      const int r = idx >= 0 && idx < s.E ? (int)idx : 0;
      v0 = __fadd_rn(v0, __half2float(sm.table[n][r]));
      v1 = __fadd_rn(v1, __half2float(sm.table[n + 1][r]));
    }
  }
  const int64_t L = en - st;
  if (b.pool == TBE_POOL_MEAN && L > 0) {
    const float f = __fdiv_rn(1.0f, __ll2float_rn(L));
    v0 = __fmul_rn(v0, f);
    v1 = __fmul_rn(v1, f);
  }
  float *o = (float *)b.out + bag * b.total_D + s.col0 + n;
  o[0] = v0;
  o[1] = v1;
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
  small_table(sm, (const __half *)b.weights + s.table, s.E, s.D, K);
  const int64_t bb0 = ((int64_t)blockIdx.x * WARPS + warp) * BAGS;
  int (*count)[KMAX] = sm.count[warp];
  for (int i = lane; i < BAGS * KMAX; i += 32)
    count[i / KMAX][i % KMAX] = 0;
  int64_t *start = sm.start[warp], *end = sm.end[warp];
  if (lane < BAGS) {
    const int64_t bb = bb0 + lane;
    start[lane] = bb < s.Bt ? load_idx<IT>(b.offsets, s.bag0 + bb) : 0;
    end[lane] = bb < s.Bt ? load_idx<IT>(b.offsets, s.bag0 + bb + 1) : 0;
  }
  __syncthreads();

  unsigned long long invalid = 0;
  small_histogram<IT>(b, s, count, start, end, lane, invalid);
  __syncwarp();
  if (s.counts)
    small_save(s, count, bb0, lane);

  /* counts (16 bags x K) times the table (K x D), 16 rows of K at a time; the accumulators of
   * lane (g, tig): bags g and g + 8, columns nt*8 + 2*tig and the one after */
  const int g = lane >> 2, tig = lane & 3;
  uint32_t a[KC][4];
  small_fragments(a, count, K, g, tig);
  for (int nt = 0; nt < s.D / 8; nt++) {
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const __half *col = sm.table[nt * 8 + g];
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
      const int ka = kc * REF_SMALL_K + tig * 2;
      if (kc * REF_SMALL_K >= K)
        break;
      const uint32_t b0 = *(const uint32_t *)(col + ka);
      const uint32_t b1 = *(const uint32_t *)(col + ka + 8);
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                   "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                   : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                   : "r"(a[kc][0]), "r"(a[kc][1]), "r"(a[kc][2]), "r"(a[kc][3]), "r"(b0),
                     "r"(b1));
    }
    const int n = nt * 8 + tig * 2;
    small_finish<IT>(b, s, sm, bb0 + g, start[g], end[g], n, c[0], c[1]);
    small_finish<IT>(b, s, sm, bb0 + g + 8, start[g + 8], end[g + 8], n, c[2], c[3]);
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
                             tbe_bounds_mode mode, dev_bounds *d_state, uint16_t *counts,
                             const int64_t *counts_base, cudaStream_t stream)
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
    const int64_t base = counts ? counts_base[f[i].t] : -1;
    small_launch s = {f[i].bag0, f[i].Bt, f[i].table, f[i].E, f[i].col0, f[i].D, fused, mode,
                      fused || mode == TBE_BOUNDS_FATAL ? d_state : nullptr,
                      base >= 0 ? (__half *)counts + base * KMAX : nullptr};
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
