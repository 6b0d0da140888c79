/* backward_small.cu: bwd.small_tc on the GPU: a small table's row gradients as counts^T x G on
 * the tensor cores (mma.sync m16n8k16, fp16 in, fp32 accumulate) from the counts the small
 * forward saved, then section 5's row update of the touched rows. Twin of ref/backward_small.c
 * (the model of this order); not the normative backward (backward_short.cu, backward_long.cu).
 *
 * Order (ref/backward_small.c's header): one block per segment of REF_SMALL_SEG bags of one
 * feature; per k-step of 16 bags in order, G's parts hi = fp16_rn(G), lo = fp16_rn(G - hi) (G
 * as bwd_g: clip, MEAN's 1/L) and the bags' counts are staged transposed in shared memory, and
 * every (16-row, 8-column) tile takes H = mma(counts, hi, H) and Lo = mma(counts, lo, Lo), two
 * chains from +0; the segment's partial is __fadd_rn(H, Lo). The apply kernel adds a row's
 * partials in segment order from the first (__fadd_rn) and updates it with dev_update_row, the
 * normative row update; rows no count touched are not written.
 * Fallback: the check kernel, before the keys (every launch, also a hoisted one), clears a
 * table's tc_ok when one of its bags has L > 256 or an element of G whose fp16 part is not
 * finite (Inf or NaN): the keys kernel then gives its positions their keys and the generic
 * tiers update it, in the same call, with no host sync.
 * Work split: a segment's block has 8 warps, warp w the rows 16*(w/2).. and the column tiles
 * 8*(w%2).. of D <= 128 (two chains of 8 tiles: 64 accumulators); the apply is a warp per row.
 */
#include "backward_impl.cuh"
#include "backward_small.h"
#include "cuda_check.h"

namespace {

const int WARPS = 8;
const int RMAX = REF_SMALL_MAX_E;
const int DMAX = 128;
const int KS = REF_SMALL_K;   /* bags per k-step */
const int KP = KS + 8;        /* halves per staged row: 12 words, so a fragment's 32 loads
                                 (row 16*t + g, word tig) hit 32 banks */
const int TILES = DMAX / 8 / 2; /* column tiles per warp */

const int COLS = WARPS * 32 / DMAX; /* bags a staging pass covers: a thread's column is fixed */
static_assert(WARPS * 32 % DMAX == 0 && DMAX % 32 == 0, "a warp stages one bag");

struct small_stage_smem {
  __half count[RMAX][KP]; /* [table row][bag of the k-step] */
  __half hi[DMAX][KP], lo[DMAX][KP]; /* [column][bag of the k-step] */
  int64_t g_row[REF_SMALL_SEG]; /* a bag's first element of G, -1 for an empty bag */
  float scale[REF_SMALL_SEG];   /* its MEAN scale (1 otherwise) */
};

__device__ __forceinline__ bool fatal_stop(const dev_bounds *state)
{
  return state && (state->first_bad_bag != ~0ull || state->first_bad_index != ~0ull);
}

/* Bag `bag`'s L, and where its G row starts and its MEAN scale; an empty bag's G is never read
 * (-1: MEAN's 1/0 would make it Inf or NaN, and its counts are all 0). Each staging and check
 * pass gives a thread one column (threadIdx.x % DMAX) and a warp one bag, so these loads are
 * uniform in the warp and no element needs a division. */
__device__ __forceinline__ int64_t small_bag(const dev_bwd &w, int32_t bag, int32_t D, int64_t &L,
                                             float &scale)
{
  L = ld_index(w.b.offsets, w.b.itype, bag + 1) - ld_index(w.b.offsets, w.b.itype, bag);
  scale = L > 0 ? bwd_mean_scale(w, bag) : 1.0f;
  return L > 0 ? bwd_g_row(w, bag, 0, D) : -1;
}

/* ---- the check: a table with a bag of L > 256 or an fp16-overflowing or NaN G falls back ---- */
__global__ void small_check_kernel(dev_bwd w)
{
  const bwd_small_seg sg = w.tc_segs[blockIdx.x];
  const bwd_small_table tb = w.tc_tables[sg.table];
  if (!w.tc_plan[tb.j])
    return;
  bool ok = true;
  const int d = threadIdx.x % DMAX;
  for (int32_t q = threadIdx.x / DMAX; q < sg.nbags; q += COLS) {
    int64_t L;
    float scale;
    const int64_t e = small_bag(w, (int32_t)(sg.bag0 + q), tb.D, L, scale);
    const float x = e >= 0 && d < tb.D ? bwd_g(w, e + d, scale) : 0.0f;
    ok = ok && L <= REF_SMALL_HIST && (__half_as_ushort(__float2half_rn(x)) & 0x7C00) != 0x7C00;
  }
  if (__syncthreads_or(!ok) && threadIdx.x == 0)
    w.tc_ok[tb.j] = 0;
}

/* ---- one k-step's operands, staged: 16 bags' counts and G's parts, zero past the segment ----
 * Marks the rows a count touches. */
__device__ __forceinline__ void small_stage(const dev_bwd &w, const bwd_small_seg &sg,
                                            const bwd_small_table &tb, int32_t k0,
                                            small_stage_smem &sm)
{
  for (int i = threadIdx.x; i < KS * RMAX; i += blockDim.x) {
    const int q = i / RMAX, r = i % RMAX;
    const uint16_t c = k0 + q < sg.nbags ? w.tc_counts[(sg.crow + k0 + q) * RMAX + r] : 0;
    sm.count[r][q] = __ushort_as_half(c);
    if (c)
      w.tc_touched[sg.table * RMAX + r] = 1;
  }
  const int d = threadIdx.x % DMAX;
  for (int q = threadIdx.x / DMAX; q < KS && d < tb.D; q += COLS) {
    __half h = __float2half_rn(0.0f), l = h;
    const int64_t e = k0 + q < sg.nbags ? sm.g_row[k0 + q] : -1;
    if (e >= 0) {
      const float x = bwd_g(w, e + d, sm.scale[k0 + q]);
      h = __float2half_rn(x);
      l = __float2half_rn(__fsub_rn(x, __half2float(h))); /* exact: Sterbenz */
    }
    sm.hi[d][q] = h;
    sm.lo[d][q] = l;
  }
}

__device__ __forceinline__ void small_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1)
{
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* ---- one k-step of a warp's tiles: rows r0.., column tiles nt0..; the A fragment (rows x
 * bags) is the counts, the B fragments (bags x columns) hi and lo ---- */
__device__ __forceinline__ void small_step(const small_stage_smem &sm, int r0, int nt0, int D,
                                           int g, int tig, float (&h)[TILES][4],
                                           float (&l)[TILES][4])
{
  const uint32_t a[4] = {*(const uint32_t *)&sm.count[r0 + g][2 * tig],
                         *(const uint32_t *)&sm.count[r0 + g + 8][2 * tig],
                         *(const uint32_t *)&sm.count[r0 + g][2 * tig + 8],
                         *(const uint32_t *)&sm.count[r0 + g + 8][2 * tig + 8]};
#pragma unroll
  for (int i = 0; i < TILES; i++) {
    const int col = (nt0 + i) * 8 + g;
    if ((nt0 + i) * 8 >= D)
      break;
    small_mma(h[i], a, *(const uint32_t *)&sm.hi[col][2 * tig],
              *(const uint32_t *)&sm.hi[col][2 * tig + 8]);
#if defined(TBE_FAULT_SMALL_TC_ONE_CHAIN) /* planted: lo into the hi chain */
    small_mma(h[i], a, *(const uint32_t *)&sm.lo[col][2 * tig],
              *(const uint32_t *)&sm.lo[col][2 * tig + 8]);
#else
    small_mma(l[i], a, *(const uint32_t *)&sm.lo[col][2 * tig],
              *(const uint32_t *)&sm.lo[col][2 * tig + 8]);
#endif
  }
}

/* ---- a segment: its k-steps in order, then the partials H + Lo of rows below E ---- */
__global__ void __launch_bounds__(WARPS * 32) small_segment_kernel(dev_bwd w,
                                                                   const dev_bounds *state)
{
  __shared__ __align__(16) small_stage_smem sm;
  const bwd_small_seg sg = w.tc_segs[blockIdx.x];
  const bwd_small_table tb = w.tc_tables[sg.table];
  if (fatal_stop(state) || !w.tc_ok[tb.j])
    return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int r0 = (warp >> 1) * 16, nt0 = (warp & 1) * TILES;
  const bool live = r0 < tb.E && nt0 * 8 < tb.D;
  float h[TILES][4] = {}, l[TILES][4] = {};
  for (int32_t q = threadIdx.x; q < sg.nbags; q += blockDim.x) { /* read by the stages */
    int64_t L;
    sm.g_row[q] = small_bag(w, (int32_t)(sg.bag0 + q), tb.D, L, sm.scale[q]);
  }
  for (int32_t k0 = 0; k0 < sg.nbags; k0 += KS) {
    __syncthreads(); /* the previous step's operands are read */
    small_stage(w, sg, tb, k0, sm);
    __syncthreads();
    if (live)
      small_step(sm, r0, nt0, tb.D, g, tig, h, l);
  }
  if (!live)
    return;
  float *part = w.tc_part + (int64_t)blockIdx.x * RMAX * DMAX;
#pragma unroll
  for (int i = 0; i < TILES; i++) {
    const int n = (nt0 + i) * 8 + 2 * tig;
    if (n >= tb.D)
      break;
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int64_t r = r0 + g + (u >> 1) * 8;
      if (r < tb.E)
        part[r * DMAX + n + (u & 1)] = __fadd_rn(h[i][u], l[i][u]);
    }
  }
}

/* ---- a touched row of a taken table: its partials in segment order, then the update ---- */
__global__ void __launch_bounds__(WARPS * 32) small_apply_kernel(dev_bwd w)
{
  const int lane = threadIdx.x & 31;
  const int64_t id = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int32_t slot = (int32_t)(id / RMAX), r = (int32_t)(id % RMAX);
  if (slot >= w.tc_ntables)
    return;
  const bwd_small_table tb = w.tc_tables[slot];
  if (!w.tc_ok[tb.j] || r >= tb.E || !w.tc_touched[slot * RMAX + r])
    return;
  constexpr int CPL = DMAX / 32;
  float gr[CPL][1];
  const float *part = w.tc_part + (int64_t)tb.seg0 * RMAX * DMAX + (int64_t)r * DMAX;
#pragma unroll
  for (int c = 0; c < CPL; c++) {
    const int d = lane + 32 * c;
    float acc = 0.0f;
    if (d < tb.D) {
      acc = part[d];
      for (int32_t s = 1; s < tb.nseg; s++)
        acc = __fadd_rn(acc, part[(int64_t)s * RMAX * DMAX + d]);
    }
    gr[c][0] = acc;
  }
  const uint64_t key = (uint64_t)(tb.key0 + r);
  float *m = w.momentum + key;
  dev_row<32, CPL, 1, false> row;
  dev_row_load<32, CPL, 1, false>(row, w.weights, w.b.wdtype, tb.woff + (int64_t)r * tb.D, tb.D,
                                  m, lane);
  dev_update_row<32, CPL, 1, false>(w.opt, w.weights, w.b.wdtype, tb.D, gr, row, m, key, lane,
                                    0xffffffffu, true);
}

} // namespace

tbe_status gpu_bwd_small_check(const dev_bwd &w, cudaStream_t stream)
{
  GPU_TRY(cudaMemcpyAsync(w.tc_ok, w.tc_plan, (size_t)w.b.num_tables, cudaMemcpyDeviceToDevice,
                          stream));
  if (w.tc_nseg > 0) {
    small_check_kernel<<<(unsigned)w.tc_nseg, WARPS * 32, 0, stream>>>(w);
    GPU_TRY(cudaGetLastError());
  }
  return tbe_ok();
}

tbe_status gpu_bwd_small(const dev_bwd &w, const dev_bounds *state, cudaStream_t stream)
{
  if (w.tc_nseg == 0)
    return tbe_ok();
  GPU_TRY(cudaMemsetAsync(w.tc_touched, 0, (size_t)w.tc_ntables * RMAX, stream));
  small_segment_kernel<<<(unsigned)w.tc_nseg, WARPS * 32, 0, stream>>>(w, state);
  GPU_TRY(cudaGetLastError());
  const int64_t warps = (int64_t)w.tc_ntables * RMAX;
  small_apply_kernel<<<(unsigned)((warps + WARPS - 1) / WARPS), WARPS * 32, 0, stream>>>(w);
  GPU_TRY(cudaGetLastError());
  return tbe_ok();
}
