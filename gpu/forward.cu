/* forward.cu: the generic gather forward on the GPU (SUM, MEAN, NONE; weighted; VBE; fused
 * bounds check), bit-identical to ref/forward.c. Not the small-table tensor-core path
 * (forward_small.cu), whose order is the hardware's.
 *
 * Accumulation order (normative, TBE_SEMANTICS.md 3): each output column is owned by one lane,
 * which adds the bag's rows in increasing position, one at a time, from +0 (fp32 with
 * __fadd_rn / __fmaf_rn for FP16/BF16 weights, fp64 with __dadd_rn / __fma_rn for FP32), then
 * MEAN multiplies by 1/L in the same precision, and the store rounds once. Loads run ahead of
 * the adds (GATHER_WIDTH rows in flight) without changing that order.
 *
 * Two gathers, the same bits (fwd.gather; the policy in gpu_fwd_plan_make): the window gather
 * (gather_kernel, below) and the direct gather (direct_kernel: one bag per group, every lane
 * loading its bag's indices itself, programs feature-major), which wins where rows come from
 * DRAM and bags are long.
 *
 * The window gather's work split: a program is a group of G lanes (a power of two,
 * GATHER_WIDTH <= G <= 32; 32/G groups per warp) covering BAGS_PER_PROGRAM consecutive bags of
 * every feature in its launch, one bag after the other (a loop over features inside the
 * program, not a B x T grid). A bag's row is cut into chunks of VB bytes (16 where D and the
 * table's offset allow), one per lane; a row longer than 64 chunks is split into column tiles
 * (grid y; both gathers). The group reads the bag's
 * indices G at a time, one per lane (coalesced), one window ahead, and passes the row pointers
 * around through shared memory, so GATHER_WIDTH row loads are in flight without a load of an
 * index in front of each.
 * Features are bucketed by (VB, G, tiles), one launch per bucket: dimension bucketing.
 */
#include <algorithm>
#include <type_traits>
#include <vector>

#include "cuda_check.h"
#include "gpu_internal.h"

namespace {

template <int VB> struct raw_vec;
template <> struct raw_vec<16> { typedef uint4 type; };
template <> struct raw_vec<4> { typedef uint32_t type; };
template <> struct raw_vec<2> { typedef uint16_t type; };

/* Per weight dtype: storage word, accumulator, and the four IEEE operations of section 3. */
template <tbe_dtype WD> struct wt;
template <> struct wt<TBE_FP32> {
  typedef uint32_t S;
  typedef double A;
  static __device__ __forceinline__ double widen(uint32_t x) { return (double)__uint_as_float(x); }
  static __device__ __forceinline__ double add(double a, double r) { return __dadd_rn(a, r); }
  static __device__ __forceinline__ double fma(float w, double r, double a)
  {
    return __fma_rn((double)w, r, a);
  }
  static __device__ __forceinline__ double inv(int64_t L) { return __ddiv_rn(1.0, __ll2double_rn(L)); }
  static __device__ __forceinline__ double mul(double a, double s) { return __dmul_rn(a, s); }
};
template <> struct wt<TBE_FP16> {
  typedef uint16_t S;
  typedef float A;
  static __device__ __forceinline__ float widen(uint16_t x)
  {
    return __half2float(__ushort_as_half(x));
  }
  static __device__ __forceinline__ float add(float a, float r) { return __fadd_rn(a, r); }
  static __device__ __forceinline__ float fma(float w, float r, float a)
  {
    return __fmaf_rn(w, r, a);
  }
  static __device__ __forceinline__ float inv(int64_t L) { return __fdiv_rn(1.0f, __ll2float_rn(L)); }
  static __device__ __forceinline__ float mul(float a, float s) { return __fmul_rn(a, s); }
};
template <> struct wt<TBE_BF16> : wt<TBE_FP16> {
  static __device__ __forceinline__ float widen(uint16_t x)
  {
    return __uint_as_float((uint32_t)x << 16);
  }
};

/* One vector load of VB bytes of a WD row, read as raw bits or as VE storage words: the unit
 * both gathers load and add. */
template <tbe_dtype WD, int VB> union gather_chunk {
  typedef typename raw_vec<VB>::type R;
  static constexpr int VE = VB / (int)sizeof(typename wt<WD>::S);
  R raw;
  typename wt<WD>::S s[VE];
};

/* What a program needs of one feature, gathered on the host; the kernel reads its fields from
 * device memory where it uses them. */
struct feat_info {
  int64_t bag0;    /* first bag */
  int64_t Bt;      /* bags */
  int64_t table;   /* element offset of the feature's table */
  int64_t E;       /* rows of the table */
  int64_t col0;    /* first output column (fixed batch) */
  int32_t D;
};

/* One launch: a bucket of features sharing a shape, cut into chunks of features (grid z). */
struct gather_launch {
  const feat_info *features; /* device [nfeat] */
  int32_t nfeat;
  int32_t feat_per_chunk;
  int32_t G;               /* lanes per bag */
  int32_t bpp;             /* bags per program */
  int32_t tile_chunks;     /* chunks per column tile (G * CPT) */
  int32_t fused;
  tbe_bounds_mode mode;
  dev_bounds *state;
};

/* Index i of an ITYPE array (the fused check may write the array, so no read-only path then). */
template <tbe_itype IT>
__device__ __forceinline__ int64_t load_index(const void *a, int64_t i, bool writable)
{
  if (IT == TBE_I32)
    return writable ? ((const int32_t *)a)[i] : __ldg((const int32_t *)a + i);
  return writable ? ((const long long *)a)[i] : __ldg((const long long *)a + i);
}

/* Adds the block's invalid count to the counter with one atomic (every thread of the block must
 * call: the kernels' only early exit, fatal_stop, reads state written before the launch, so a
 * block leaves together). The counter is an integer sum, the same in any order; one atomic per
 * block instead of per warp keeps short-bag launches off the counter's one address. */
__device__ __forceinline__ void flush_invalid(const gather_launch &g, unsigned long long invalid)
{
  __shared__ unsigned long long s_invalid[32];
  for (int o = 16; o > 0; o >>= 1)
    invalid += __shfl_xor_sync(0xffffffffu, invalid, o);
  if ((threadIdx.x & 31) == 0)
    s_invalid[threadIdx.x / 32] = invalid;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned w = 1; w < blockDim.x / 32; w++)
      invalid += s_invalid[w];
    if (invalid)
      atomicAdd(&g.state->counter, invalid);
  }
}

__device__ __forceinline__ bool fatal_stop(const gather_launch &g)
{
  return g.mode == TBE_BOUNDS_FATAL && g.state &&
         (g.state->first_bad_bag != ~0ull || (!g.fused && g.state->first_bad_index != ~0ull));
}

/* Stores a lane's chunk of VE (1, 4 or 8) consecutive output columns at element i: 16- or
 * 8-byte vector stores when `vec` (the chunk lies inside the row and i is aligned to the
 * vector), else element by element for the first n columns. */
template <int VE, typename A>
__device__ __forceinline__ void store_chunk(void *out, tbe_dtype t, int64_t i, const A (&v)[VE],
                                            int n, bool vec)
{
  static_assert(VE == 1 || VE == 4 || VE == 8, "chunks are one element or 16 bytes");
  if constexpr (VE > 1) {
    if (vec && t == TBE_FP32) {
#pragma unroll
      for (int e = 0; e < VE; e += 4)
        *(float4 *)((float *)out + i + e) = make_float4(out_f32(v[e]), out_f32(v[e + 1]),
                                                        out_f32(v[e + 2]), out_f32(v[e + 3]));
      return;
    }
    if (vec) {
      uint32_t w[VE / 2];
#pragma unroll
      for (int e = 0; e < VE; e += 2)
        w[e / 2] = out_16(v[e], t) | out_16(v[e + 1], t) << 16;
      if constexpr (VE == 8)
        *(uint4 *)((uint16_t *)out + i) = make_uint4(w[0], w[1], w[2], w[3]);
      else
        *(uint2 *)((uint16_t *)out + i) = make_uint2(w[0], w[1]);
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < VE; e++)
    if (e < n)
      st_out(out, t, i + e, v[e]);
}

/* Bag `bag` of feature f (L positions) from its accumulator: MEAN's scaling, then this lane's
 * chunks (c0, c0 + G, ...; those it has) stored, each rounded once. */
template <tbe_dtype WD, int CPT, int VE>
__device__ __forceinline__ void store_bag(const dev_batch &b, const feat_info *f, int64_t bag,
                                          int64_t L, typename wt<WD>::A (&acc)[CPT][VE], int c0,
                                          int G, const bool (&has)[CPT])
{
  const int32_t D = f->D;
  const int64_t o = b.bag_out ? b.bag_out[bag] : (bag - f->bag0) * b.total_D + f->col0;
  if (b.pool == TBE_POOL_MEAN && L > 0) {
    const typename wt<WD>::A inv = wt<WD>::inv(L);
#pragma unroll
    for (int k = 0; k < CPT; k++)
#pragma unroll
      for (int e = 0; e < VE; e++)
        acc[k][e] = wt<WD>::mul(acc[k][e], inv);
  }
  const int unit = min(VE, b.out_dtype == TBE_FP32 ? 4 : 8);
  const bool aligned = o % unit == 0;
#pragma unroll
  for (int k = 0; k < CPT; k++) {
    const int col = (c0 + k * G) * VE;
    if (has[k])
      store_chunk<VE>(b.out, b.out_dtype, o + col, acc[k], D - col, aligned && col + VE <= D);
  }
}

/* Blocks per SM the register budget aims at: rows in flight cost registers (VB*GW*CPT bytes per
 * lane), so wider kernels trade occupancy for loads in flight. A tighter cap spills (the
 * narrow shape needs 64 registers), and spills cost more than the occupancy they buy; the
 * measured choice is in bench/RESULTS.md. */
template <int VB, int CPT, int GW>
constexpr int min_blocks()
{
  return VB * GW * CPT <= 64 ? 8 : VB * GW * CPT <= 128 ? 5 : 3;
}

/* The lean window gather's cap (one 16-byte chunk per lane): one block per SM more than the
 * window's at 8 rows in flight, the window's 8 blocks at 4. The registers it takes away are the
 * per-feature values (the feature range, the program's first bag): ptxas -v on sm_90 shows them
 * spilled once per thread and reloaded once per feature, outside the loop over rows, whose
 * values all stay in registers. */
template <int GW> constexpr int lean_blocks() { return GW == 8 ? 6 : 8; }

/* The row a position without one reads (-1, or past the bag's end in its last group): zeros,
 * with weight 0, so it adds +0 to the accumulator, which leaves it unchanged (the accumulator
 * starts at +0 and a round-to-nearest sum is never -0), and the gather needs no per-row test. */
__device__ __align__(16) uint4 zero_row[TBE_MAX_D * sizeof(float) / sizeof(uint4)]; /* widest row */

/* Loads index p and its weight into idx, pw when p < end (else leaves them). */
template <tbe_itype IT, bool WEIGHTED, bool FUSED>
__device__ __forceinline__ void prefetch(const dev_batch &b, int64_t p, int64_t end,
                                         int64_t &idx, float &pw)
{
  if (p < end) {
    idx = load_index<IT>(b.indices, p, FUSED);
    if (WEIGHTED)
      pw = __ldg(b.psw + p);
  }
}

/* The first m of GW rows (r, weights rw when WEIGHTED; m <= GW) added to acc in position order:
 * all their chunks loaded first, so m rows are in flight, then each row's elements added in
 * turn. The rows past m are neither loaded nor added: a caller passes m < GW only where those
 * rows are zero rows of weight 0, whose adds leave acc unchanged (zero_row's rule), so the bits
 * are those of all GW. Both gathers add through it, which is why they give the same bits; with
 * m the constant GW the tests fold away. */
template <tbe_dtype WD, int VB, int CPT, int GW, bool WEIGHTED>
__device__ __forceinline__ void add_rows(const typename wt<WD>::S *const (&r)[GW],
                                         const float (&rw)[GW], const int (&chunk_at)[CPT],
                                         typename wt<WD>::A (&acc)[CPT][gather_chunk<WD, VB>::VE],
                                         int m)
{
  typedef gather_chunk<WD, VB> chunk;
  typedef typename chunk::R R;
  chunk rows[GW][CPT];
#pragma unroll
  for (int q = 0; q < GW; q++)
#pragma unroll
    for (int k = 0; k < CPT; k++)
      if (q < m)
        rows[q][k].raw = __ldg((const R *)r[q] + chunk_at[k]);
#pragma unroll
  for (int q = 0; q < GW; q++)
#pragma unroll
    for (int k = 0; k < CPT; k++)
#pragma unroll
      for (int e = 0; e < chunk::VE; e++)
        if (q < m) {
          const typename wt<WD>::A x = wt<WD>::widen(rows[q][k].s[e]);
          acc[k][e] = WEIGHTED ? wt<WD>::fma(rw[q], x, acc[k][e]) : wt<WD>::add(acc[k][e], x);
        }
}

/* The window gather's rows j .. j + m - 1 of the group's window (m <= GW): their addresses and
 * weights read from shared memory, where the window's lanes left them, then added. */
template <tbe_dtype WD, int VB, int CPT, int GW, bool WEIGHTED>
__device__ __forceinline__ void
window_rows(const typename wt<WD>::S *const *s_row, const float *s_pw, int j, int m,
            const int (&chunk_at)[CPT], typename wt<WD>::A (&acc)[CPT][gather_chunk<WD, VB>::VE])
{
  typedef typename wt<WD>::S S;
  const S *r[GW];
  float rw[GW];
#pragma unroll
  for (int q = 0; q < GW; q += 2) {
    const ulonglong2 v = *(const ulonglong2 *)&s_row[j + q];
    r[q] = (const S *)v.x;
    r[q + 1] = (const S *)v.y;
  }
  if (WEIGHTED)
#pragma unroll
    for (int q = 0; q < GW; q += 4)
      *(float4 *)&rw[q] = *(const float4 *)&s_pw[j + q];
  add_rows<WD, VB, CPT, GW, WEIGHTED>(r, rw, chunk_at, acc, m);
}

/* Each group of G lanes takes a bag; the bag's positions are read in windows of G: lane li
 * loads index w + li (coalesced, one window ahead), checks it when fused (so each position is
 * checked once, by the lane that loaded it), and turns it into its row's address, which it
 * leaves in shared memory; the group then gathers the window's rows GW at a time and adds them in
 * position order. G >= GW (both powers of two), so a window holds whole groups of GW.
 * Feature fields are read from g.features where they are used rather than kept in registers:
 * registers are what limits the warps, and so the loads, in flight.
 * LEAN (fwd.gather=lean, 16-byte chunks, one chunk per lane) is the same walk with fewer
 * registers and instructions: positions and bags in 32 bits (the plan takes it only where
 * every position and bag number, plus a window, fits), and a window's last rows, fewer than
 * GW, loaded and added alone (add_rows' m), not padded with zero rows; its register cap is
 * lean_blocks'. */
template <tbe_dtype WD, tbe_itype IT, int VB, int CPT, int GW, bool WEIGHTED, bool FUSED,
          bool LEAN>
__global__ void __launch_bounds__(128, LEAN ? lean_blocks<GW>() : min_blocks<VB, CPT, GW>())
    gather_kernel(dev_batch b, gather_launch g)
{
  typedef typename wt<WD>::S S;
  typedef typename wt<WD>::A A;
  typedef typename std::conditional<LEAN, int32_t, int64_t>::type P; /* positions, bags */
  constexpr int VE = gather_chunk<WD, VB>::VE;
  __shared__ __align__(16) const S *s_row[4][32]; /* a window's rows */
  __shared__ __align__(16) float s_pw[WEIGHTED ? 4 : 1][32];
  __shared__ P s_end[4][32]; /* the program's bag ends, loaded at once */
  if (fatal_stop(g))
    return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int G = g.G, li = lane & (G - 1), lane0 = lane - li; /* G a power of two */
  const unsigned mask = G == 32 ? 0xffffffffu : ((1u << G) - 1) << lane0;
  const P b0 = (P)((((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> (__ffs(G) - 1)) * g.bpp);
  const int c0 = (int)blockIdx.y * g.tile_chunks + li;
  unsigned long long invalid = 0;

  const int f_end = min(g.nfeat, ((int)blockIdx.z + 1) * g.feat_per_chunk);
  for (int fi = (int)blockIdx.z * g.feat_per_chunk; fi < f_end; fi++) {
    const feat_info *f = g.features + fi;
    const P bag0 = (P)f->bag0, bag_end = bag0 + (P)min((int64_t)b0 + g.bpp, f->Bt);
    const int32_t D = f->D;
    const S *table = (const S *)b.weights + f->table;
    const int chunks = D / VE + (D % VE != 0);
    bool has[CPT];
    int chunk_at[CPT]; /* the chunk this lane loads: its own, or chunk 0 when it has none */
#pragma unroll
    for (int k = 0; k < CPT; k++) {
      has[k] = c0 + k * G < chunks;
      chunk_at[k] = has[k] ? c0 + k * G : 0;
    }
    const P first = bag0 + b0;
    if (first >= bag_end)
      continue;
    const int nb = (int)(bag_end - first); /* <= bpp <= 4 <= G */
    const int64_t E = FUSED ? f->E : 0;
    P start = (P)load_index<IT>(b.offsets, first, false);
    __syncwarp(mask);
    if (li < nb)
      s_end[warp][lane] = (P)load_index<IT>(b.offsets, first + 1 + li, false);
    __syncwarp(mask);
    P end = s_end[warp][lane0];
    /* this lane's index (and weight) of the next window, loaded one window ahead so that its
     * latency hides behind the current window's rows; the next window may be the next bag's */
    int64_t nidx = 0;
    float npw = 0.0f;
    prefetch<IT, WEIGHTED, FUSED>(b, start + li, end, nidx, npw);
    for (int i = 0; i < nb; i++) {
      const P bag = first + i;
      const P next_end = i + 1 < nb ? s_end[warp][lane0 + i + 1] : end;
      if (start >= end) /* no window to prefetch the next bag's from */
        prefetch<IT, WEIGHTED, FUSED>(b, end + li, next_end, nidx, npw);
      A acc[CPT][VE];
#pragma unroll
      for (int k = 0; k < CPT; k++)
#pragma unroll
        for (int e = 0; e < VE; e++)
          acc[k][e] = 0;
      for (P w = start; w < end; w += G) {
        /* index phase: this lane's position of the window */
        int64_t idx = nidx;
        float pw = npw;
        const bool more = w + G < end;
        prefetch<IT, WEIGHTED, FUSED>(b, (more ? w + G : end) + li, more ? end : next_end, nidx,
                                      npw);
        const S *row = (const S *)zero_row;
        if (w + li < end && FUSED)
          idx = fused_check(b.indices, b.itype, g.mode, g.state, w + li, idx, E,
                            blockIdx.y == 0, invalid);
        if (w + li < end && idx != -1)
          row = table + idx * D;
        else
          pw = 0.0f;
        __syncwarp(mask);
        s_row[warp][lane] = row;
        if (WEIGHTED)
          s_pw[WEIGHTED ? warp : 0][lane] = pw;
        __syncwarp(mask);
        /* gather phase: GW rows in flight, added in position order; LEAN stops the full steps
         * where fewer than GW rows are left, and adds those alone */
        const int n = (int)min((P)G, end - w);
        int j = 0;
#pragma unroll 1
        for (; j < (LEAN ? n - GW + 1 : n); j += GW)
          window_rows<WD, VB, CPT, GW, WEIGHTED>(&s_row[warp][lane0],
                                                 &s_pw[WEIGHTED ? warp : 0][lane0], j, GW,
                                                 chunk_at, acc);
        if (LEAN && j < n)
          window_rows<WD, VB, CPT, GW, WEIGHTED>(&s_row[warp][lane0],
                                                 &s_pw[WEIGHTED ? warp : 0][lane0], j, n - j,
                                                 chunk_at, acc);
      }
      store_bag<WD, CPT, VE>(b, f, bag, end - start, acc, c0, G, has);
      start = end;
      end = next_end;
    }
  }
  if (g.state)
    flush_invalid(g, invalid);
}

/* The direct gather (fwd.gather=direct): one bag per group of G lanes, and every lane loads each
 * index of its bag itself (the group's G loads of one index are one broadcast), so a row's
 * address comes from an independent load, not through shared memory: GW rows are in flight,
 * the bag's last ones too (loads predicated), then added in position order. The same adds in
 * the same order as the window gather, so the same bits. Fused, the group's first lane (of the
 * first column tile) counts and repairs an invalid index; every lane reads it as 0 (a lane that
 * loads it after the repair reads the 0 itself). Programs are feature-major (grid z: the
 * feature), so the warps resident together read one table, as a plain gather's do. */
template <tbe_dtype WD, tbe_itype IT, int VB, int CPT, int GW, bool WEIGHTED, bool FUSED>
__global__ void __launch_bounds__(128, min_blocks<VB, CPT, GW>())
    direct_kernel(dev_batch b, gather_launch g)
{
  typedef typename wt<WD>::S S;
  typedef typename wt<WD>::A A;
  constexpr int VE = gather_chunk<WD, VB>::VE;
  if (fatal_stop(g))
    return;
  const int G = g.G, li = (int)threadIdx.x & (G - 1);
  const int64_t bi = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> (__ffs(G) - 1);
  const int c0 = (int)blockIdx.y * g.tile_chunks + li;
  const bool owner = li == 0 && blockIdx.y == 0;
  unsigned long long invalid = 0;
  const int f_end = min(g.nfeat, ((int)blockIdx.z + 1) * g.feat_per_chunk);
  for (int fi = (int)blockIdx.z * g.feat_per_chunk; fi < f_end; fi++) {
    const feat_info *f = g.features + fi;
    if (bi >= f->Bt)
      continue;
    const int64_t bag = f->bag0 + bi;
    const int32_t D = f->D;
    const S *table = (const S *)b.weights + f->table;
    const int chunks = D / VE + (D % VE != 0);
    bool has[CPT];
    int chunk_at[CPT];
#pragma unroll
    for (int k = 0; k < CPT; k++) {
      has[k] = c0 + k * G < chunks;
      chunk_at[k] = has[k] ? c0 + k * G : 0;
    }
    const int64_t E = FUSED ? f->E : 0;
    const int64_t start = load_index<IT>(b.offsets, bag, false);
    const int64_t end = load_index<IT>(b.offsets, bag + 1, false);
    A acc[CPT][VE];
#pragma unroll
    for (int k = 0; k < CPT; k++)
#pragma unroll
      for (int e = 0; e < VE; e++)
        acc[k][e] = 0;
    for (int64_t p = start; p < end; p += GW) {
      const S *r[GW];
      float rw[GW];
#pragma unroll
      for (int q = 0; q < GW; q++) {
        int64_t idx = -1;
        if (p + q < end) {
          idx = load_index<IT>(b.indices, p + q, FUSED);
          if (FUSED)
            idx = fused_check(b.indices, b.itype, g.mode, g.state, p + q, idx, E, owner,
                              invalid);
        }
        r[q] = idx != -1 ? table + idx * D : (const S *)zero_row;
        rw[q] = WEIGHTED && idx != -1 ? __ldg(b.psw + p + q) : 0.0f;
      }
      add_rows<WD, VB, CPT, GW, WEIGHTED>(r, rw, chunk_at, acc, GW);
    }
    store_bag<WD, CPT, VE>(b, f, bag, end - start, acc, c0, G, has);
  }
  if (g.state)
    flush_invalid(g, invalid);
}

/* Pooling NONE: one warp per bag; output row p is row indices[p] converted (the output was
 * zeroed first, for -1 and for positions outside every bag). */
template <tbe_dtype WD>
__global__ void none_kernel(dev_batch b, gather_launch g)
{
  typedef typename wt<WD>::S S;
  if (fatal_stop(g))
    return;
  const int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  unsigned long long invalid = 0;
  if (bag < b.total_B) {
    const int32_t t = bag_feature(b.B_offsets, b.T, bag);
    const int32_t j = b.ftm[t], D = b.D[j];
    const S *table = (const S *)b.weights + b.table_offset[j];
    const int64_t start = ld_index_rw(b.offsets, b.itype, bag);
    const int64_t end = ld_index_rw(b.offsets, b.itype, bag + 1);
    for (int64_t p = start; p < end; p++) {
      int64_t idx = ld_index_rw(b.indices, b.itype, p);
      if (g.fused)
        idx = fused_check(b.indices, b.itype, g.mode, g.state, p, idx, b.E[j], lane == 0, invalid);
      for (int d = lane; idx != -1 && d < D; d += 32) {
        const typename wt<WD>::A r = wt<WD>::widen(__ldg(table + idx * D + d));
        st_out(b.out, b.out_dtype, p * D + d, (float)r);
      }
    }
  }
  if (g.state)
    flush_invalid(g, invalid);
}

/* A bucket: features that share the kernel shape. */
struct bucket {
  int vb, G, cpt, tiles;
  std::vector<feat_info> features;
  int64_t max_B;
  int64_t table_bytes; /* of the largest table its features read */
  int64_t min_row;     /* bytes of its narrowest row */
};

int pow2_ceil(int x)
{
  int p = 1;
  while (p < x)
    p *= 2;
  return p;
}

/* Which kernel a bucket runs: the window gather, its lean form, or the direct gather. */
enum gather_kind { KIND_WINDOW, KIND_LEAN, KIND_DIRECT };

template <tbe_dtype WD, tbe_itype IT, int VB, int CPT, int GW, bool W, bool F>
void launch_kernel(gather_kind kind, dim3 grid, const dev_batch &b, const gather_launch &g,
                   cudaStream_t stream)
{
  if (kind == KIND_DIRECT)
    direct_kernel<WD, IT, VB, CPT, GW, W, F><<<grid, 128, 0, stream>>>(b, g);
  else if (VB == 16 && CPT == 1 && kind == KIND_LEAN) /* the plan's lean buckets */
    gather_kernel<WD, IT, VB, CPT, GW, W, F, VB == 16 && CPT == 1><<<grid, 128, 0, stream>>>(b, g);
  else
    gather_kernel<WD, IT, VB, CPT, GW, W, F, false><<<grid, 128, 0, stream>>>(b, g);
}

template <tbe_dtype WD, tbe_itype IT, int VB, int CPT, int GW>
void launch_weighted(gather_kind kind, dim3 grid, const dev_batch &b, const gather_launch &g,
                     cudaStream_t stream)
{
  if (b.psw && g.fused)
    launch_kernel<WD, IT, VB, CPT, GW, true, true>(kind, grid, b, g, stream);
  else if (b.psw)
    launch_kernel<WD, IT, VB, CPT, GW, true, false>(kind, grid, b, g, stream);
  else if (g.fused)
    launch_kernel<WD, IT, VB, CPT, GW, false, true>(kind, grid, b, g, stream);
  else
    launch_kernel<WD, IT, VB, CPT, GW, false, false>(kind, grid, b, g, stream);
}

template <tbe_dtype WD, int VB, int CPT, int GW>
void launch_itype(gather_kind kind, dim3 grid, const dev_batch &b, const gather_launch &g,
                  cudaStream_t stream)
{
  if (b.itype == TBE_I32)
    launch_weighted<WD, TBE_I32, VB, CPT, GW>(kind, grid, b, g, stream);
  else
    launch_weighted<WD, TBE_I64, VB, CPT, GW>(kind, grid, b, g, stream);
}

template <tbe_dtype WD, int VB, int CPT>
void launch_width(int width, gather_kind kind, dim3 grid, const dev_batch &b,
                  const gather_launch &g, cudaStream_t stream)
{
  if (width == 8)
    launch_itype<WD, VB, CPT, 8>(kind, grid, b, g, stream);
  else
    launch_itype<WD, VB, CPT, 4>(kind, grid, b, g, stream);
}

template <tbe_dtype WD>
void launch_bucket(const bucket &k, int width, gather_kind kind, dim3 grid, const dev_batch &b,
                   const gather_launch &g, cudaStream_t stream)
{
  constexpr int ES = WD == TBE_FP32 ? 4 : 2;
  if (k.vb == 16) {
    if (k.cpt == 1)
      launch_width<WD, 16, 1>(width, kind, grid, b, g, stream);
    else
      launch_width<WD, 16, 2>(width, kind, grid, b, g, stream);
  } else {
    if (k.cpt == 1)
      launch_width<WD, ES, 1>(width, kind, grid, b, g, stream);
    else
      launch_width<WD, ES, 2>(width, kind, grid, b, g, stream);
  }
}

/* Warps that keep every SM busy for several waves: more programs than this gain nothing, fewer
 * leave SMs idle, so a bucket with few programs splits its features into chunks (grid z). */
int64_t target_warps() { return (int64_t)gpu_sm_count() * 64 * 4; }

} // namespace

tbe_status gpu_forward_check_config(const gpu_fwd_config *cfg)
{
  if (!cfg)
    return tbe_ok();
  /* a program's bag ends are loaded by its first `bags` lanes (bags <= G, G >= width >= 4), and
   * launch_width has kernels for 4 and 8 rows in flight only */
  if (cfg->bags != 0 && cfg->bags != 1 && cfg->bags != 2 && cfg->bags != 4)
    return tbe_error(TBE_EINVAL, "fwd.bags", -1, "bags per program is %d, not 0 (policy), 1, 2 or 4",
                     cfg->bags);
  if (cfg->width != 0 && cfg->width != 4 && cfg->width != 8)
    return tbe_error(TBE_EINVAL, "fwd.width", -1, "gather width is %d, not 0 (policy), 4 or 8",
                     cfg->width);
  if (cfg->gather != GPU_GATHER_AUTO && cfg->gather != GPU_GATHER_DIRECT &&
      cfg->gather != GPU_GATHER_WINDOW && cfg->gather != GPU_GATHER_LEAN)
    return tbe_error(TBE_EINVAL, "fwd.gather", -1,
                     "gather mode is %d, not auto, direct, window or lean", (int)cfg->gather);
  if (cfg->small != GPU_SMALL_AUTO && cfg->small != GPU_SMALL_ON && cfg->small != GPU_SMALL_OFF)
    return tbe_error(TBE_EINVAL, "fwd.small", -1, "small-table mode is %d, not auto, on or off",
                     (int)cfg->small);
  return tbe_ok();
}

/* The launches of one forward configuration, planned once on the host (buckets, grids, the
 * features' descriptions on the device), so that a forward enqueues kernels and nothing else. */
struct gpu_fwd_plan {
  struct launch {
    bucket k;
    gather_launch g;
    dim3 grid;
    gather_kind kind;
    int width; /* rows in flight */
  };
  std::vector<launch> launches;
  feat_info *d_features = nullptr;
  ~gpu_fwd_plan() { cudaFree(d_features); }
};

tbe_status gpu_fwd_plan_make(const tbe_batch *h, const tbe_layout *l, const int32_t *features,
                             int n, const gpu_fwd_config *cfg, gpu_fwd_plan **out)
{
  *out = nullptr;
  gpu_fwd_plan *p = new gpu_fwd_plan();
  const int es = (int)tbe_dtype_size(h->wdtype);
  /* a group's lanes: at least 8 by the policy (or fwd.width), however narrow the rows */
  const int group_floor = cfg && cfg->width ? cfg->width : 8;
  std::vector<bucket> buckets;
  for (int i = 0; i < n && h->pool != TBE_POOL_NONE; i++) {
    const int32_t t = features[i], j = h->feature_table_map[t];
    const bool wide = (int64_t)h->D[j] * es % 16 == 0 && h->table_offset[j] * es % 16 == 0;
    bucket k;
    k.vb = wide ? 16 : es;
    const int chunks = wide ? h->D[j] * es / 16 : h->D[j];
    k.G = std::max(group_floor, std::min(32, pow2_ceil(chunks)));
    k.cpt = chunks <= 32 ? 1 : 2;
    k.tiles = (chunks + k.G * k.cpt - 1) / (k.G * k.cpt);
    auto it = std::find_if(buckets.begin(), buckets.end(), [&](const bucket &x) {
      return x.vb == k.vb && x.G == k.G && x.cpt == k.cpt && x.tiles == k.tiles;
    });
    if (it == buckets.end()) {
      k.max_B = k.table_bytes = 0;
      k.min_row = INT64_MAX;
      buckets.push_back(k);
      it = buckets.end() - 1;
    }
    it->table_bytes = std::max<int64_t>(it->table_bytes, h->E[j] * h->D[j] * es);
    it->min_row = std::min<int64_t>(it->min_row, (int64_t)h->D[j] * es);
    const int64_t Bt = l->B_offsets[t + 1] - l->B_offsets[t];
    it->features.push_back(
        {l->B_offsets[t], Bt, h->table_offset[j], h->E[j], l->D_offsets[t], h->D[j]});
    it->max_B = std::max(it->max_B, Bt);
  }
  std::vector<feat_info> all;
  for (const bucket &k : buckets)
    all.insert(all.end(), k.features.begin(), k.features.end());
  if (cudaMalloc(&p->d_features, sizeof(feat_info) * (all.size() + 1)) != cudaSuccess) {
    delete p;
    return tbe_error(TBE_ENOMEM, "gpu", -1, "cannot allocate the forward's plan");
  }
  cudaError_t e = cudaMemcpy(p->d_features, all.data(), sizeof(feat_info) * all.size(),
                             cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    delete p;
    GPU_TRY(e);
  }
  size_t at = 0;
  for (const bucket &k : buckets) {
    gpu_fwd_plan::launch x;
    x.k = k;
    gather_launch &g = x.g;
    g = {};
    g.features = p->d_features + at;
    at += k.features.size();
    g.nfeat = (int32_t)k.features.size();
    g.G = k.G;
    g.tile_chunks = k.G * k.cpt;
    /* policy from the measured sweep (bench/RESULTS.md): the direct gather where rows come
     * from DRAM (a table outgrows L2: its programs read one table at a time), bags average 16
     * rows or more and rows are at least 128 bytes, unless the check is fused (there the
     * window is faster); elsewhere the window gather, where rows are hit in cache, bags are a
     * few rows or rows narrow (it issues fewer instructions per row). The window's four bags
     * per program hide the per-bag latency of short bags, one keeps more programs for long
     * ones. */
    const gpu_gather_mode mode = cfg ? cfg->gather : GPU_GATHER_AUTO;
    const bool from_dram =
        k.table_bytes > gpu_l2_bytes() && h->N >= 16 * l->total_B && k.min_row >= 128;
    const bool direct = mode == GPU_GATHER_DIRECT ||
                        (mode == GPU_GATHER_AUTO && !(cfg && cfg->fused_bounds) && from_dram);
    /* the lean window where its kernel exists (a 16-byte chunk per lane) and its 32-bit
     * positions and bags hold every one, a window (32) past the last: asked for, or by the
     * policy where the direct gather's shapes do not run (measured faster on F4, S1 and the
     * sweep's short bags and narrow rows, fused on F4 too; fused on F1 the window was) */
    const bool lean = (mode == GPU_GATHER_LEAN || (mode == GPU_GATHER_AUTO && !from_dram)) &&
                      !direct && k.vb == 16 && k.cpt == 1 && h->N <= INT32_MAX - 64 &&
                      l->total_B <= INT32_MAX - 64;
    x.kind = direct ? KIND_DIRECT : lean ? KIND_LEAN : KIND_WINDOW;
    g.bpp = direct ? 1 : cfg && cfg->bags ? cfg->bags : h->N < 64 * l->total_B ? 4 : 1;
    /* rows in flight: 4 for the lean window over four short bags a program in groups of 16
     * lanes or more (rows of 256 bytes and up), where its two more resident blocks
     * (lean_blocks) beat the deeper window (F4, the sweep's L <= 8); else 8 (groups of 8
     * lanes: F3; one long bag a program); measured: bench/RESULTS.md */
    x.width = cfg && cfg->width               ? cfg->width
              : x.kind == KIND_LEAN && g.bpp == 4 && k.G >= 16 ? 4
                                                              : 8;
    const int64_t programs = (k.max_B + g.bpp - 1) / g.bpp;
    if (programs == 0)
      continue;
    const int64_t warps = (programs * k.G + 31) / 32 * k.tiles;
    /* direct: a feature per grid z slice (as many as the grid allows) */
    const int64_t fchunks = direct
                                ? std::min<int64_t>(g.nfeat, 65535)
                                : std::min<int64_t>(g.nfeat, (target_warps() + warps - 1) / warps);
    g.feat_per_chunk = (int32_t)((g.nfeat + fchunks - 1) / fchunks);
    x.grid = dim3((unsigned)((programs * k.G + 127) / 128), (unsigned)k.tiles,
                  (unsigned)((g.nfeat + g.feat_per_chunk - 1) / g.feat_per_chunk));
    x.k.features.clear();
    p->launches.push_back(x);
  }
  *out = p;
  return tbe_ok();
}

void gpu_fwd_plan_free(gpu_fwd_plan *p) { delete p; }

tbe_status gpu_forward_gather(const dev_batch &b, const gpu_fwd_plan *p, int fused,
                              tbe_bounds_mode mode, dev_bounds *d_state, cudaStream_t stream)
{
  gather_launch base = {};
  base.fused = fused;
  base.mode = mode;
  base.state = fused || mode == TBE_BOUNDS_FATAL ? d_state : nullptr;
  if (b.pool == TBE_POOL_NONE) {
    GPU_TRY(cudaMemsetAsync(b.out, 0, (size_t)b.N * (size_t)b.total_D / (size_t)b.T *
                                          tbe_dtype_size(b.out_dtype), stream));
    unsigned blocks = (unsigned)((b.total_B * 32 + 127) / 128);
    if (blocks == 0)
      return tbe_ok();
    if (b.wdtype == TBE_FP32)
      none_kernel<TBE_FP32><<<blocks, 128, 0, stream>>>(b, base);
    else if (b.wdtype == TBE_FP16)
      none_kernel<TBE_FP16><<<blocks, 128, 0, stream>>>(b, base);
    else
      none_kernel<TBE_BF16><<<blocks, 128, 0, stream>>>(b, base);
    GPU_TRY(cudaGetLastError());
    return tbe_ok();
  }
  for (const gpu_fwd_plan::launch &x : p->launches) {
    gather_launch g = x.g;
    g.fused = base.fused;
    g.mode = base.mode;
    g.state = base.state;
    if (b.wdtype == TBE_FP32)
      launch_bucket<TBE_FP32>(x.k, x.width, x.kind, x.grid, b, g, stream);
    else if (b.wdtype == TBE_FP16)
      launch_bucket<TBE_FP16>(x.k, x.width, x.kind, x.grid, b, g, stream);
    else
      launch_bucket<TBE_BF16>(x.k, x.width, x.kind, x.grid, b, g, stream);
    GPU_TRY(cudaGetLastError());
  }
  return tbe_ok();
}
