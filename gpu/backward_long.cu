/* backward_long.cu: the long-run path of the GPU backward (SL >= threshold, but the runs of one
 * chunk that the short tier takes, bwd_short_below): chunk programs of `chunk` entries each sum
 * their part of a run; the partials are combined and the optimizer applied either by a second
 * kernel (accum) or, in the same launch, by the chunk program that counts the run's last chunk
 * down (fused: partial, __threadfence, atomic countdown). Twin of ref/backward_long.c
 * (ref_bwd_long_grad); not short runs (backward_short.cu).
 *
 * A long run of one chunk (threshold <= SL <= chunk, longer than the short tier's one-chunk runs)
 * has its optimizer step applied by its chunk program, from the chunk's sum, with no partial,
 * countdown or apply: both combines start from the first partial, so one partial is the run's
 * gradient in either (atomic: widened exactly, added to +0 and rounded back, the same float).
 *
 * Accumulation order: each chunk from +0 in sorted order (bwd_sum). Deterministic combine: one
 * partial slot per chunk, added in ascending chunk order starting from the first partial, by one
 * group, or (a run of more than APPLY_WIDE chunks, in both modes) by a block in a third kernel, a
 * column a thread in the same order, so bit-exact whatever order the chunks ran in. Atomic
 * combine: an fp64 atomicAdd of every (exact, widened) partial into one zeroed fp64 row per run,
 * in whatever order the chunks arrive, rounded once to fp32 by the apply (ref/SEMANTICS.md;
 * checked by the bound of ref/backward_exact.c, tight enough to see one partial among millions).
 * Long runs of every table go through the widest table's group shape (they are few; bucketing is
 * for short runs).
 *
 * Schedule (bwd.grid, bwd.order, bwd.delay, bwd.steal; no bit depends on it): group slot q of
 * the chunk kernel's grid-stride loop, or the q-th slot taken from the steal counter
 * (bwd_steal), takes chunk program chunk_at(q), a bijection on the programs (ascending,
 * descending or a fixed pseudo-random permutation); every array is indexed by the program, so
 * only which group runs it, and when, changes, and a stolen program counts its run down as any
 * other. bwd.delay makes each program sleep a pseudo-random time between its sum and the stores
 * of its partial (delay_ns), in accum mode too (harmless there: the apply is a later kernel).
 */
#include <algorithm>

#include "backward_impl.cuh"
#include "cuda_check.h"
#include "gpu_internal.h"
#include "tbe_gpu.h"

namespace {

const int BLOCK = 128;

/* policy: the chunk programs or long runs a group takes per steal (bwd.steal): one, since a
 * chunk program (bwd.chunk entries, 256 by default) or a run's combine is already as much work
 * as a batch of short runs, and the tail, where a hot run's programs end, stays shortest (a
 * warp holds up to one batch it has not started, bwd_steal). */
const int LONG_BATCH = 1;

/* SplitMix64's finaliser of x + key + round: the Feistel round function of chunk_at. */
__device__ __forceinline__ uint64_t order_mix(uint64_t x, uint64_t key, int round)
{
  uint64_t z = x + key + (uint64_t)(round + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The chunk program that group slot q of n takes: q (ascending), n-1-q (descending), or (shuffle)
 * a 4-round Feistel network keyed by w.order_key on the smallest even bit width 2h with
 * 2^2h >= n, cycle-walked into [0, n) (at most 4 steps expected). Each is a bijection on
 * [0, n), so every program runs exactly once. */
__device__ __forceinline__ int64_t chunk_at(const dev_bwd &w, int64_t q, int64_t n)
{
  if (w.order == GPU_ORDER_DESC)
    return n - 1 - q;
  if (w.order != GPU_ORDER_SHUFFLE)
    return q;
  int h = 0;
  while ((int64_t)1 << (2 * h) < n)
    h++;
  const uint64_t mask = ((uint64_t)1 << h) - 1;
  uint64_t x = (uint64_t)q;
  do {
    uint64_t l = x >> h, r = x & mask;
    for (int i = 0; i < 4; i++) {
      const uint64_t t = l ^ (order_mix(r, w.order_key, i) & mask);
      l = r;
      r = t;
    }
    x = l << h | r;
  } while (x >= (uint64_t)n);
  return (int64_t)x;
}

/* bwd.delay: how long chunk program q sleeps before it publishes its partial, in [0, w.delay)
 * ns: a hash of q, the case seed's order key and the launch number, so the sleeps differ
 * between programs and between the launches of a session. Only when the chunk programs end,
 * never what they compute, depends on it. */
__device__ __forceinline__ unsigned delay_ns(const dev_bwd &w, int64_t q)
{
  const uint64_t key = w.order_key ^ 0x64656c6179ull ^ ((uint64_t)w.launch << 32);
  return (unsigned)(order_mix((uint64_t)q, key, 0) >> 32) % w.delay;
}

/* Whether long run L's one chunk program applies its step itself (its sum is the run's
 * gradient): then it has no partial, no countdown and no accumulator row. */
__device__ __forceinline__ bool apply_here(const bwd_long &L)
{
  return L.chunks == 1;
}

/* Chunk programs of each long run, its countdown and (atomic) its zeroed accumulator row. */
__global__ void expand_kernel(dev_bwd w)
{
  const int64_t n = w.counts->longs;
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const bwd_long L = w.longs[i];
    for (int32_t c = threadIdx.x; c < L.chunks; c += blockDim.x)
      w.chunks[L.chunk0 + c] = {(int32_t)i, c};
    if (w.atomic && !apply_here(L))
      for (int32_t d = threadIdx.x; d < w.max_D; d += blockDim.x)
        w.acc[i * w.max_D + d] = 0.0;
    if (threadIdx.x == 0)
      w.countdown[i] = L.chunks;
  }
}

/* VEC partial values from p (aligned to VEC when VEC = 4: one vector load), through L2: the
 * chunk programs that wrote them ran on other SMs. */
template <int VEC> __device__ __forceinline__ void part_load(const float *p, float (&x)[VEC])
{
  if (VEC == 4) {
    const float4 f = __ldcg((const float4 *)p);
    x[0] = f.x;
    x[1 % VEC] = f.y;
    x[2 % VEC] = f.z;
    x[3 % VEC] = f.w;
  } else {
    x[0] = __ldcg(p);
  }
}

/* The apply kernel's partials in flight per lane: as many chunks as keep RING x columns per
 * lane within 64 registers (the kernel has one group per long run, so registers cost it no
 * occupancy that matters), at most 16; 0 (the unrolled loop) past 32 columns, where a ring of
 * one would keep fewer loads out than the unrolled loop does. */
__host__ __device__ constexpr int apply_ring(int cols)
{
  return cols > 32 ? 0 : 64 / cols > 16 ? 16 : 64 / cols;
}

/* g += partials 1 .. end-1 of the run whose partials start at p (a row of max_D each), in
 * ascending chunk order, through a ring of RING chunks' partials in registers: each slot is
 * reloaded RING chunks ahead as soon as it is added (slots past the last partial reload the
 * last one and are never added), so RING loads are out while one is added. A hot run of
 * thousands of chunks is then a chain of latencies divided by RING, not by the three or four
 * loads the compiler keeps out of the unrolled loop. The adds are the unrolled loop's. */
template <int W, int CPL, int VEC, int RING>
__device__ __forceinline__ void combine_ring(const float *p, int64_t max_D, int32_t end,
                                             int32_t D, int lane, float (&g)[CPL][VEC])
{
  const int32_t last = end > 1 ? end - 1 : 0;
  float q[RING][CPL][VEC];
  auto load = [&](int32_t k, float(&x)[CPL][VEC]) {
    const float *pk = p + (int64_t)min(k, last) * max_D;
#pragma unroll
    for (int c = 0; c < CPL; c++)
      if (VEC * (lane + W * c) < D)
        part_load<VEC>(pk + VEC * (lane + W * c), x[c]);
  };
#pragma unroll
  for (int j = 0; j < RING; j++)
    load(1 + j, q[j]);
  for (int32_t k = 1; k < end; k += RING) {
#pragma unroll
    for (int j = 0; j < RING; j++) {
      if (k + j < end) {
#pragma unroll
        for (int c = 0; c < CPL; c++)
          if (VEC * (lane + W * c) < D)
#pragma unroll
            for (int v = 0; v < VEC; v++)
              g[c][v] = __fadd_rn(g[c][v], q[j][c][v]);
      }
      load(k + j + RING, q[j]);
    }
  }
}

/* policy: a long run of more chunks than APPLY_WIDE has its partials combined by a whole block
 * (apply_wide_kernel), a column a thread with WIDE_RING chunks' loads out per thread, where a
 * group keeps at most 16 chunks out (apply_ring); the runs up to it stay with a group each, as
 * a block per run would leave most of its threads idle on them. */
const int APPLY_WIDE = 64, WIDE_RING = 32;

/* The deterministic combine takes long run L's partials apply_end(L) at a time: all of them. */
__device__ __forceinline__ int32_t apply_end(const bwd_long &L)
{
#if defined(TBE_FAULT_DROP_LAST_CHUNK) /* planted: the last chunk's partial left out */
  return L.chunks - 1;
#else
  return L.chunks;
#endif
}

/* The weights and momentum of run r's row (D wide) into wr, loaded by a group (raw: a combine
 * runs while they load); returns where the momentum goes (NULL: none). */
template <int W, int CPL, int VEC>
__device__ __forceinline__ float *apply_row_load(const dev_bwd &w, const bwd_run &r, int32_t D,
                                                 int lane, dev_row<W, CPL, VEC, true> &wr)
{
  float *const m = w.momentum ? w.momentum + r.key : nullptr;
  const int64_t row = (int64_t)(r.key - (uint64_t)w.rows_cumsum[r.table]);
  dev_row_load(wr, w.weights, w.b.wdtype, bwd_weight_at(w, r.table, row), D, m, lane);
  return m;
}

/* g = long run i's row gradient (L its descriptor) from its partials, through combine_ring where
 * RING > 0 (one group; a group that is not live adds no partial). */
template <int W, int CPL, int VEC, int RING>
__device__ __forceinline__ void run_grad(const dev_bwd &w, int64_t i, const bwd_long &L, int32_t D,
                                         int lane, bool live, float (&g)[CPL][VEC])
{
  if (w.atomic) {
#pragma unroll
    for (int c = 0; c < CPL; c++)
      if (VEC * (lane + W * c) < D)
#pragma unroll
        for (int v = 0; v < VEC; v++)
          g[c][v] = __double2float_rn(__ldcg(w.acc + i * w.max_D + VEC * (lane + W * c) + v));
    return;
  }
  const int32_t end = live ? apply_end(L) : 1;
  const float *p = w.part + (int64_t)L.chunk0 * w.max_D;
#pragma unroll
  for (int c = 0; c < CPL; c++)
    if (VEC * (lane + W * c) < D)
      part_load<VEC>(p + VEC * (lane + W * c), g[c]);
  if constexpr (RING > 0) {
    combine_ring<W, CPL, VEC, RING>(p, w.max_D, end, D, lane, g);
  } else {
    /* chunk by chunk, every column chunk's loads together and four chunks unrolled, so the
     * loads go out ahead of the adds, which stay in chunk order: one load waited for at a time
     * would make a long run a chain of memory latencies */
#pragma unroll 4
    for (int32_t k = 1; k < end; k++) {
      p += w.max_D;
#pragma unroll
      for (int c = 0; c < CPL; c++) {
        if (VEC * (lane + W * c) >= D)
          continue;
        float q[VEC];
        part_load<VEC>(p + VEC * (lane + W * c), q);
#pragma unroll
        for (int v = 0; v < VEC; v++)
          g[c][v] = __fadd_rn(g[c][v], q[v]);
      }
    }
  }
}

/* Long run i's row gradient (run_grad), then its optimizer step (one group; the lanes in mask
 * call it together; a group that is not live stores nothing). */
template <int W, int CPL, int VEC, int RING>
__device__ void apply_run(const dev_bwd &w, int64_t i, int lane, unsigned mask, bool live)
{
  const bwd_long L = w.longs[i];
  const int32_t D = w.b.D[L.r.table];
  dev_row<W, CPL, VEC, true> wr;
  float *const m = apply_row_load(w, L.r, D, lane, wr);
  float g[CPL][VEC];
  run_grad<W, CPL, VEC, RING>(w, i, L, D, lane, live, g);
  dev_update_row<W, CPL, VEC>(w.opt, w.weights, w.b.wdtype, D, g, wr, m, L.r.key, lane, mask, live);
}

/* Whether long run L is left to apply_wide_kernel: deterministic, more than APPLY_WIDE chunks. */
__device__ __forceinline__ bool apply_wide(const dev_bwd &w, const bwd_long &L)
{
  return !w.atomic && L.chunks > APPLY_WIDE;
}

/* The long runs that apply_wide holds, a block per run (grid stride): thread t adds columns t,
 * t + BLOCK, ... of the run's partials in ascending chunk order from the first partial, through
 * combine_ring (WIDE_RING loads out per thread): apply_run's adds, so its bits. The row goes
 * through shared memory ([max_D] floats) to the block's first warp, whose first group (apply_run's
 * shape) applies the optimizer step; its weights load under the combine. */
template <int W, int CPL, int VEC>
__global__ void __launch_bounds__(BLOCK) apply_wide_kernel(dev_bwd w)
{
  extern __shared__ float wide_row[];
  const int64_t n = w.counts->longs;
  const int lane = threadIdx.x % W;
  const bool first = threadIdx.x < 32; /* the warp that applies the step */
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const bwd_long L = w.longs[i];
    if (!apply_wide(w, L))
      continue;
    const int32_t D = w.b.D[L.r.table];
    dev_row<W, CPL, VEC, true> wr;
    float *const m = first ? apply_row_load(w, L.r, D, lane, wr) : nullptr;
    const float *p = w.part + (int64_t)L.chunk0 * w.max_D;
    for (int32_t c0 = 0; c0 < D; c0 += BLOCK) {
      float g[1][1] = {{0.0f}};
      if ((int32_t)threadIdx.x < D - c0) {
        part_load<1>(p + c0 + threadIdx.x, g[0]);
        combine_ring<BLOCK, 1, 1, WIDE_RING>(p + c0, w.max_D, apply_end(L), D - c0,
                                             (int)threadIdx.x, g);
        wide_row[c0 + threadIdx.x] = g[0][0];
      }
    }
    __syncthreads();
    if (first) {
      float g[CPL][VEC];
#pragma unroll
      for (int c = 0; c < CPL; c++)
#pragma unroll
        for (int v = 0; v < VEC; v++)
          g[c][v] = VEC * (lane + W * c) + v < D ? wide_row[VEC * (lane + W * c) + v] : 0.0f;
      dev_update_row<W, CPL, VEC>(w.opt, w.weights, w.b.wdtype, D, g, wr, m, L.r.key, lane,
                                  0xffffffffu, threadIdx.x < W);
    }
    __syncthreads(); /* the row is the next run's */
  }
}

/* ---- bwd.bulk: a chunk program's partial added to its run's fp64 row by one bulk reduce ----
 * The group's lanes widen their partial into the group's staging row in shared memory; after
 * the async proxy's fence and the warp's sync, the group's lane 0 issues cp.reduce.async.bulk
 * .add.f64 of the row onto w.acc (each element added atomically, as atomicAdd adds it: the same
 * fp64 additions in some order, so the atomic bound holds unchanged) and commits it. Lane 0
 * waits until the reduce has read the row before the row is written again, until its writes
 * are done before a fused countdown (so the program that counts the run down last reads every
 * partial), and before the kernel ends (no reduce outlives the block's shared memory). The
 * reduce wants 16-byte aligned rows and a size in 16 bytes: bulk_span gives the elements it
 * covers, [a0, a0 + m), and the ones outside go by atomicAdd; element d is staged at d + a0, so
 * that the staged a0 falls on 16 bytes too. */
struct bulk_span {
  int a0, m;
};

__device__ __forceinline__ bulk_span bulk_span_of(const double *row, int32_t D)
{
  const int a0 = ((uintptr_t)row & 15) ? 1 : 0;
  return {a0, (D - a0) & ~1};
}

/* doubles a group's staging row takes: room for the shift by a0, kept a multiple of 16 bytes */
__host__ __device__ constexpr int64_t bulk_stride(int64_t max_D)
{
  return (max_D + 2) & ~(int64_t)1;
}

/* Partial element x of column d: staged for the reduce, or added by atomicAdd outside its span. */
__device__ __forceinline__ void bulk_put(double *stage, double *row, bulk_span sp, int d, double x)
{
  if (d >= sp.a0 && d < sp.a0 + sp.m)
    stage[d + sp.a0] = x;
  else
    atomicAdd(row + d, x);
}

__device__ __forceinline__ void bulk_wait_read()
{
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

/* This thread's reduces done, their writes ordered before its later generic accesses. */
__device__ __forceinline__ void bulk_wait_done()
{
  asm volatile("cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;" ::: "memory");
}

/* The staged row (every lane's stores to it fenced for the async proxy and synced) onto row. */
__device__ __forceinline__ void bulk_issue(double *row, const double *stage, bulk_span sp)
{
  const uint64_t dst = (uint64_t)__cvta_generic_to_global(row + sp.a0);
  const uint32_t src = (uint32_t)__cvta_generic_to_shared(stage + 2 * sp.a0);
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f64 [%0], [%1], %2;\n\t"
               "cp.async.bulk.commit_group;"
               :
               : "l"(dst), "r"(src), "r"((uint32_t)(8 * sp.m))
               : "memory");
}

/* policy: the chunk kernel's blocks per SM under the register cap: rows of 128 columns by
 * vector loads keep 5, with 96 registers, each U rows' loads in flight at once; left to ptxas
 * (1: no cap), that kernel took 80 registers and issued those loads one at a time into one
 * register quad, and the long tier ran 27-34% slower (bench/RESULTS.md). */
constexpr int chunk_min_blocks(int cols, int vec)
{
  return vec == 4 && cols == 128 ? 5 : 1;
}

/* STEAL (bwd.steal): the slots come from bwd_steal, LONG_BATCH at a time, not the grid stride. */
template <int W, int CPL, int VEC, int U, bool PLAIN, bool STEAL>
__global__ void __launch_bounds__(BLOCK, chunk_min_blocks(W * CPL * VEC, VEC))
    chunk_kernel(dev_bwd w, int fused)
{
  const int lane = threadIdx.x % W;
  const unsigned full = 0xffffffffu, mask = bwd_group_mask<W>();
  const int64_t n = w.counts->chunks;
  const int64_t groups = (int64_t)gridDim.x * (BLOCK / W);
  const int64_t lag = (threadIdx.x % 32) / W; /* as in short_kernel: the warp steps together */
  unsigned *const ctr = &w.counts->steal_chunk;
  bwd_steal<LONG_BATCH, 32 / W> st;
  int64_t slot = (int64_t)blockIdx.x * (BLOCK / W) + threadIdx.x / W;
  extern __shared__ __align__(16) double bulk_rows[]; /* bwd.bulk: a staging row per group */
  double *const stage = bulk_rows + (threadIdx.x / W) * bulk_stride(w.max_D);
  if constexpr (STEAL) {
    st.start(ctr, n);
    slot = st.take(ctr, n, (int)lag);
  }
  for (; slot - lag < n; slot = STEAL ? st.take(ctr, n, (int)lag) : slot + groups) {
    const bool live = slot < n;
    const int64_t q = live ? chunk_at(w, slot, n) : 0;
    const bwd_chunk ch = w.chunks[q];
    const bwd_long L = w.longs[ch.lrun];
    const bwd_run &r = L.r;
    const int32_t D = w.b.D[r.table];
    /* here: the run is this program's alone (apply_here); keep: it leaves a partial */
    const bool here = live && apply_here(L), keep = live && !here;
    /* positions, below N < 2^31 (chunk * w.chunk is within the run; w.chunk may be INT32_MAX) */
    const int32_t s = r.start + ch.chunk * w.chunk;
    const int32_t e = live ? s + min(r.start + r.len - s, w.chunk) : s;
    const int32_t span = W < 32 ? (int32_t)__reduce_max_sync(full, (unsigned)(e - s)) : e - s;
    float acc[CPL][VEC];
    bwd_sum<W, CPL, VEC, U, PLAIN>(w, s, e, span, D, bwd_pos(w, s, e, lane), acc, lane, full);
#if defined(TBE_FAULT_COUNTDOWN_FIRST) /* planted: the countdown before the partial is written */
    int early = 0;
    if (fused && keep && lane == 0)
      early = atomicSub(w.countdown + ch.lrun, 1) == 1;
    early = __shfl_sync(full, early, 0, W);
#endif
    if (w.delay) /* bwd.delay: widens the window between the sum and the stores below */
      __nanosleep(delay_ns(w, q));
    double *const row = w.acc + (int64_t)ch.lrun * w.max_D;
    const bulk_span sp = w.bulk ? bulk_span_of(row, D) : bulk_span{};
    if (w.bulk) { /* the staging row free again: the last reduce has read it */
      if (lane == 0)
        bulk_wait_read();
      __syncwarp(full);
    }
#pragma unroll
    for (int c = 0; c < CPL; c++) {
      const int d0 = VEC * (lane + W * c);
      if (d0 >= D || !keep)
        continue;
      if (!w.atomic) {
        float *p = w.part + q * w.max_D + d0;
        if (VEC == 4) /* one vector store (max_D and d0 are multiples of 4) */
          *(float4 *)p = make_float4(acc[c][0], acc[c][1 % VEC], acc[c][2 % VEC], acc[c][3 % VEC]);
        else
          *p = acc[c][0];
        continue;
      }
#if defined(TBE_FAULT_DROP_LAST_CHUNK) /* planted: the atomic combine leaves it out too */
      if (ch.chunk == L.chunks - 1)
        continue;
#endif
#pragma unroll
      for (int v = 0; v < VEC; v++)
        if (w.bulk)
          bulk_put(stage, row, sp, d0 + v, (double)acc[c][v]);
        else
          atomicAdd(row + d0 + v, (double)acc[c][v]);
    }
    if (w.bulk) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncwarp(full);
      if (lane == 0 && keep && sp.m > 0)
        bulk_issue(row, stage, sp);
    }
    int last = 0;
    if (fused) {
#if !defined(TBE_FAULT_BULK_NO_WAIT) /* planted: counted down while the reduce may be in flight */
      if (w.bulk && lane == 0)
        bulk_wait_done();
#endif
#if !defined(TBE_FAULT_FUSED_NO_FENCE) /* planted: the partial may not be visible to the last */
      if (keep)
        __threadfence();
#endif
      __syncwarp(full);
#if defined(TBE_FAULT_COUNTDOWN_FIRST)
      last = early;
#else
      if (lane == 0 && keep)
        last = atomicSub(w.countdown + ch.lrun, 1) == 1;
#endif
      last = __shfl_sync(full, last, 0, W);
    }
    /* the step of a run this group finishes, after the warp's collectives (its own mask): a run
     * of this program alone from its sum, or (fused) the run it counted down last from its
     * partials, each visible after the fence; one call site, so one copy of the step */
    if (here || (last && !apply_wide(w, L))) {
      dev_row<W, CPL, VEC, true> wr;
      float *const m = apply_row_load(w, r, D, lane, wr);
      if (!here) {
        __threadfence();
        run_grad<W, CPL, VEC, 0>(w, ch.lrun, L, D, lane, true, acc);
      }
      dev_update_row<W, CPL, VEC>(w.opt, w.weights, w.b.wdtype, D, acc, wr, m, r.key, lane, mask,
                                  true);
    }
  }
  if (w.bulk && lane == 0)
    bulk_wait_done();
}

/* STEAL as in chunk_kernel. */
template <int W, int CPL, int VEC, bool STEAL>
__global__ void __launch_bounds__(BLOCK) apply_kernel(dev_bwd w)
{
  const int lane = threadIdx.x % W;
  const int64_t n = w.counts->longs;
  const int64_t groups = (int64_t)gridDim.x * (BLOCK / W);
  const int64_t lag = (threadIdx.x % 32) / W; /* as in short_kernel: the warp steps together */
  unsigned *const ctr = &w.counts->steal_apply;
  bwd_steal<LONG_BATCH, 32 / W> st;
  int64_t i = (int64_t)blockIdx.x * (BLOCK / W) + threadIdx.x / W;
  if constexpr (STEAL) {
    st.start(ctr, n);
    i = st.take(ctr, n, (int)lag);
  }
  for (; i - lag < n; i = STEAL ? st.take(ctr, n, (int)lag) : i + groups) {
    const int64_t j = i < n ? i : 0;
    const bwd_long &L = w.longs[j];
    const bool live = i < n && !apply_wide(w, L) && !apply_here(L);
    if (__all_sync(0xffffffffu, !live)) /* no group of the warp has a run to apply */
      continue;
    apply_run<W, CPL, VEC, apply_ring(CPL * VEC)>(w, j, lane, 0xffffffffu, live);
  }
}

} // namespace

/* The widest table's bucket decides the group shape of every long run. */
tbe_status gpu_bwd_long(const dev_bwd &w, int fused, cudaStream_t stream)
{
  if (w.long_cap == 0)
    return tbe_ok();
  const int64_t cap = gpu_bwd_max_blocks();
  expand_kernel<<<(unsigned)std::min<int64_t>(w.long_cap, cap), BLOCK, 0, stream>>>(w);
  GPU_TRY(cudaGetLastError());
  int k = 0;
  while ((1 << k) < w.max_D)
    k++;
  const bool plain = bwd_plain(w);
  tbe_status st = tbe_ok();
  bwd_dispatch(w.vec, k, [&](auto vec, auto kk) {
    constexpr int VEC = decltype(vec)::value;
    typedef bwd_shape<VEC, decltype(kk)::value> S;
    const int per = BLOCK / S::W;
    const int64_t cwant = (w.chunk_cap + per - 1) / per, awant = (w.long_cap + per - 1) / per;
    /* policy: the chunk kernel's grid-stride loop on SMs x 16 blocks, not on the resident grid
     * as the short tier's: measured slower there on every long-run shape of the SL sweep
     * (bench/RESULTS.md) */
    const unsigned cblocks = w.grid > 0 ? (unsigned)w.grid
                                        : (unsigned)std::min<int64_t>(cwant, cap);
    const dim3 grid(std::max(cblocks, 1u));
    constexpr bool P = VEC == 4; /* PLAIN with vector loads only, as in the short tier */
    /* bwd.bulk: the chunk kernel's staging rows, one per group, in dynamic shared memory */
    const size_t smem = w.bulk ? (size_t)per * bulk_stride(w.max_D) * sizeof(double) : 0;
    /* f with `bytes` of dynamic shared memory on `blocks` blocks, or (0) on the resident grid of
     * a stealing kernel (gpu_bwd_resident_grid) */
    auto launch = [&](const auto f, int64_t want, unsigned blocks, size_t bytes,
                      auto... args) -> tbe_status {
      if (bytes > 48 * 1024) /* past the default: the kernel must ask for it */
        GPU_TRY(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
      if (blocks == 0)
        STATUS_TRY(gpu_bwd_resident_grid(w, (const void *)f, BLOCK, want, &blocks, bytes));
      f<<<blocks, BLOCK, bytes, stream>>>(args...);
      return tbe_ok();
    };
    /* policy: two rows in flight, measured faster than four (bench/RESULTS.md) */
    auto go = [&](auto u) {
      constexpr int U = decltype(u)::value;
      if (w.steal && plain)
        st = launch(chunk_kernel<S::W, S::CPL, VEC, U, P, true>, cwant, 0, smem, w, fused);
      else if (w.steal)
        st = launch(chunk_kernel<S::W, S::CPL, VEC, U, false, true>, cwant, 0, smem, w, fused);
      else if (plain)
        st = launch(chunk_kernel<S::W, S::CPL, VEC, U, P, false>, cwant, grid.x, smem, w, fused);
      else
        st = launch(chunk_kernel<S::W, S::CPL, VEC, U, false, false>, cwant, grid.x, smem, w,
                    fused);
    };
    bwd_with_width<S::U>(w.long_width, go);
    if (!fused && st.code == TBE_OK) {
      const unsigned ablocks = (unsigned)std::min<int64_t>(awant, cap);
      st = w.steal ? launch(apply_kernel<S::W, S::CPL, VEC, true>, awant, 0, 0, w)
                   : launch(apply_kernel<S::W, S::CPL, VEC, false>, awant, std::max(ablocks, 1u),
                            0, w);
    }
    /* the runs of many chunks, after the chunk kernel in both modes (the fused countdown's last
     * program leaves them), a block each on at most the resident grid */
    if (!w.atomic && st.code == TBE_OK)
      st = launch(apply_wide_kernel<S::W, S::CPL, VEC>, w.long_cap, 0,
                  sizeof(float) * (size_t)w.max_D, w);
  });
  if (st.code != TBE_OK)
    return st;
  GPU_TRY(cudaGetLastError());
  return tbe_ok();
}
