/* backward.cu: the GPU backward + optimizer of TBE_SEMANTICS.md sections 4-5: its buffers, the
 * run classification (short runs into next_pow2(D) buckets, long runs into chunk programs), the
 * per-sample-weight gradients, and the order of launches. Twin of ref/backward.c; the kernels
 * of the transpose, short and long paths are in transpose.cu, backward_short.cu, backward_long.cu.
 *
 * No host sync between the forward and the end of the optimizer: every size on the host is an
 * upper bound known from the batch's shape (N lookups, rows, threshold, chunk); the kernels read
 * the actual counts in device memory and loop over them.
 * Accumulation order: psw_grad[p] is the 32-lane dot of the bag's G row with the row's weights
 * before the update (ref/backward.c's psw_grads); row gradients and updates as the path files say.
 */
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cub/block/block_scan.cuh>

#include "backward_impl.cuh"
#include "backward_small.h"
#include "cuda_check.h"
#include "gpu_internal.h"

namespace {

const int CLS_BLOCK = 256;

/* Runs of one block tile by kind: short per bucket (S buckets: BWD_BUCKETS, or 1 when no
 * short list is written), long, and the long runs' chunks. */
template <int S> struct cls_counts {
  unsigned s[S];
  unsigned l, c;
};
template <int S> struct cls_add {
  __device__ cls_counts<S> operator()(const cls_counts<S> &a, const cls_counts<S> &b) const
  {
    cls_counts<S> r;
#pragma unroll
    for (int k = 0; k < S; k++)
      r.s[k] = a.s[k] + b.s[k];
    r.l = a.l + b.l;
    r.c = a.c + b.c;
    return r;
  }
};

__host__ __device__ __forceinline__ int bucket_of(int32_t D)
{
  int k = 0;
  while ((1 << k) < D)
    k++;
  return k;
}

/* The table whose key range holds key: the last j with rows_cumsum[j] <= key. */
__device__ __forceinline__ int32_t key_table(const dev_bwd &w, uint64_t key)
{
  int32_t lo = 0, hi = w.b.num_tables - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if ((uint64_t)w.rows_cumsum[mid] <= key)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* bwd.steal: the short batches of one tile's segments (bwd_steal_range says the rule and why
 * each item is taken once). This thread's item, when `item`: list k (slot: its place among the
 * scan's S lists), its index li among the m items of this tile's segment of the list, `at` its
 * index in the list, cp its place among the tile's items of every list (segments side by side)
 * and start its run's first sorted position. The tile's threads call it together, after the
 * scan's temporary storage is last read; it leaves tmp and the shared starts to the caller's
 * next barrier. */
template <int S>
__device__ void classify_batches(const dev_bwd &w, typename cub::BlockScan<cls_counts<S>,
                                 CLS_BLOCK>::TempStorage &tmp, bool item, int k, int slot,
                                 int32_t li, int32_t m, int32_t at, int32_t cp, int32_t start)
{
  __shared__ int32_t starts[CLS_BLOCK];
  __shared__ unsigned base[S];
  if (item)
    starts[cp] = start;
  __syncthreads();
  const int32_t per = BWD_BATCH_ENTRIES;
  const bool opens = item && (li % w.batch_runs[k] == 0 || starts[cp - 1] / per != start / per);
  cls_counts<S> mine = {}, excl, total;
  mine.s[slot] = opens;
  const cls_counts<S> zero = {};
  cub::BlockScan<cls_counts<S>, CLS_BLOCK>(tmp).ExclusiveScan(mine, excl, zero, cls_add<S>(),
                                                              total);
  if (threadIdx.x < S)
    base[threadIdx.x] = total.s[threadIdx.x]
                            ? atomicAdd(&w.counts->batches[S == 1 ? k : (int)threadIdx.x],
                                        total.s[threadIdx.x])
                            : 0u;
  __syncthreads();
  if (!item)
    return;
  /* this item's batch: the ones the segment opened before it, and its own when it opens one */
  bwd_batch *const b = w.batches + w.batch_base[k] + base[slot] + excl.s[slot];
  if (opens) {
    b->lo = at;
    if (li > 0) /* the batch before, opened earlier in the segment (its first item opens one) */
      b[-1].hi = at;
  }
  if (li == m - 1)
    b[opens ? 0 : -1].hi = at + 1;
}

/* Stream-compacts the runs into the short lists and the long list: an in-block prefix sum of
 * the kinds, then one atomic per block and counter for the block's base. DIRECT (the short tier
 * reads the encode's runs, bwd_direct_run): only the long list is written. bwd.steal: each tile
 * also cuts its segments of the short lists into batches (classify_batches; DIRECT: the tile's
 * runs are one segment of the encode's, which is the short tier's list). */
template <bool DIRECT>
__global__ void __launch_bounds__(CLS_BLOCK) classify_kernel(dev_bwd w)
{
  constexpr int S = DIRECT ? 1 : BWD_BUCKETS;
  typedef cls_counts<S> counts_t;
  typedef cub::BlockScan<counts_t, CLS_BLOCK> scan_t;
  __shared__ typename scan_t::TempStorage tmp;
  __shared__ counts_t base;
  const int64_t n = w.counts->num_runs;
  const int wide = bucket_of(w.max_D);
  for (int64_t t0 = (int64_t)blockIdx.x * CLS_BLOCK; t0 < n; t0 += (int64_t)gridDim.x * CLS_BLOCK) {
    const int64_t r = t0 + threadIdx.x;
    counts_t mine = {};
    int kind = 0, k = 0;
    int32_t table = 0, chunks = 0;
    if (r < n) {
      const uint64_t key = bwd_key(w, r);
      if (key != (uint64_t)w.sentinel) {
        const int32_t len = w.run_len[r];
        if (bwd_is_short(w, len)) {
          if constexpr (!DIRECT) {
            table = key_table(w, key);
            k = w.bucket ? bucket_of(w.b.D[table]) : wide;
            mine.s[k] = 1;
            kind = 1;
          }
        } else {
          table = key_table(w, key);
          chunks = (int32_t)((len + (int64_t)w.chunk - 1) / w.chunk);
          mine.l = 1;
          mine.c = (unsigned)chunks;
          kind = 2;
        }
      }
    }
    /* a tile with nothing to list skips its scan (DIRECT: a tile without a long run, nearly
     * every tile); bwd.steal cuts every tile's batches, so it scans them all */
    if (!w.steal && !__syncthreads_or(kind))
      continue;
    counts_t excl, total;
    const counts_t zero = {};
    scan_t(tmp).ExclusiveScan(mine, excl, zero, cls_add<S>(), total);
    if (threadIdx.x == 0) {
      if constexpr (!DIRECT)
        for (int b = 0; b < S; b++)
          base.s[b] = total.s[b] ? atomicAdd(&w.counts->shorts[b], total.s[b]) : 0;
      base.l = total.l ? atomicAdd(&w.counts->longs, total.l) : 0;
      base.c = total.c ? atomicAdd(&w.counts->chunks, total.c) : 0;
    }
    __syncthreads();
    if (kind) {
      const bwd_run run = {w.run_start[r], w.run_len[r], table, 0, bwd_key(w, r)};
      if (kind == 2)
        w.longs[base.l + excl.l] = {run, (int32_t)(base.c + excl.c), chunks};
      else if constexpr (!DIRECT) /* kind 1, a short run: DIRECT has none */
        w.shorts[w.short_base[k] + base.s[k] + excl.s[k]] = run;
    }
    if (w.steal) {
      const int32_t start = r < n ? w.run_start[r] : 0;
      if constexpr (DIRECT) {
        classify_batches<S>(w, tmp, r < n, wide, 0, (int32_t)threadIdx.x,
                            (int32_t)min((int64_t)CLS_BLOCK, n - t0), (int32_t)r,
                            (int32_t)threadIdx.x, start);
      } else {
        int32_t before = 0; /* the tile's short runs of the lists before k */
#pragma unroll
        for (int b = 0; b < S; b++)
          before += b < k ? (int32_t)total.s[b] : 0;
        classify_batches<S>(w, tmp, kind == 1, k, k, (int32_t)excl.s[k], (int32_t)total.s[k],
                            (int32_t)(base.s[k] + excl.s[k]), before + (int32_t)excl.s[k], start);
      }
    }
    __syncthreads();
  }
}

/* psw_grad[p] for every position in a bag whose index is not -1 (one warp per position; the
 * array is zeroed first). */
__global__ void psw_kernel(dev_bwd w, const dev_bounds *state)
{
  const dev_batch &b = w.b;
  if (state && (state->first_bad_bag != ~0ull || state->first_bad_index != ~0ull))
    return;
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
  for (int64_t p = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; p < b.N; p += warps) {
    const int32_t bag = w.bag_of_pos[p];
    const int64_t idx = ld_index(b.indices, b.itype, p);
    if (bag < 0 || idx == -1)
      continue;
    const int32_t j = b.ftm[bag_feature(b.B_offsets, b.T, bag)], D = b.D[j];
    const int64_t g0 = bwd_g_row(w, bag, p, D), w0 = bwd_weight_at(w, j, idx);
    float s = 0.0f;
    for (int32_t d = lane; d < D; d += 32)
      s = __fmaf_rn(bwd_g(w, g0 + d, 1.0f), dev_load_w(w.weights, b.wdtype, w0 + d), s);
    s = dev_lane_butterfly<32>(s, 0xffffffffu);
    if (lane == 0)
      w.psw_grad[p] = s;
  }
}

} // namespace

int64_t gpu_bwd_max_blocks() { return (int64_t)gpu_sm_count() * 16; }

tbe_status gpu_bwd_resident_grid(const dev_bwd &w, const void *f, int block, int64_t want,
                              unsigned *blocks, size_t smem)
{
  if (w.grid > 0) {
    *blocks = (unsigned)w.grid;
    return tbe_ok();
  }
  int per_sm = 0;
  GPU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, block, smem));
  const int64_t resident = (int64_t)gpu_sm_count() * per_sm;
  *blocks = (unsigned)std::max<int64_t>(1, std::min<int64_t>(want, resident));
  return tbe_ok();
}

/* One session's backward: the device view, its buffers, pristine inputs, and the last call's
 * timing events. */
struct gpu_bwd {
  dev_bwd w;
  gpu_transpose_bufs t;
  dev_arena arena;
  void *pristine_weights;
  float *pristine_momentum;
  size_t weight_bytes;
  int64_t rows, short_cap[BWD_BUCKETS];
  int fused, no_bucket, no_direct, noise, hoist;
  const tbe_batch *h;
  /* bwd.small_tc, opened with it (tc_open): the device plan and this call's flags, the counts the
   * forward saves (counts_base[t]: feature t's first bag's row, -1 none) and the host's copy of
   * the plan last uploaded */
  int small_tc, tc_open;
  unsigned char *tc_plan, *tc_ok;
  uint16_t *tc_counts;
  std::vector<int64_t> counts_base;
  std::vector<unsigned char> plan_host;
  /* bwd.small_tc without a bounds check (the offsets the host holds are the call's): the tables
   * of the host's batch and grad_output that the rule takes (ref_small_tc_taken_from, at open
   * and upload), and whether the current plan takes every table a feature uses, so no position
   * is left to the generic tiers and the metadata is not made */
  std::vector<unsigned char> tables, host_taken;
  bool tc_all;
  gpu_noise noise_kernel;
  cudaEvent_t ev[7];
  cudaEvent_t hoist_ev[2]; /* around the metadata that the last forward enqueued (bwd.hoist) */
  bool timed;
  bool hoisted;            /* the last enqueue took its metadata from the forward */

  ~gpu_bwd()
  {
    gpu_noise_free(&noise_kernel);
    for (cudaEvent_t e : ev)
      if (e)
        cudaEventDestroy(e);
    for (cudaEvent_t e : hoist_ev)
      if (e)
        cudaEventDestroy(e);
  }
};

static tbe_status bwd_alloc(gpu_bwd *g, size_t n, size_t elem, void **p)
{
  return g->arena.alloc(tbe_mul_size(n, elem), p);
}

/* Takes gc's values (NULL: the defaults) after checking them; no_bucket and no_direct only at
 * setup (they size the run lists). */
static tbe_status bwd_config(gpu_bwd *g, const gpu_bwd_config *gc, bool setup)
{
  const gpu_bwd_config c = gc ? *gc : gpu_bwd_config{};
  const char *bad = c.long_mode != GPU_LONG_ACCUM && c.long_mode != GPU_LONG_FUSED ? "long_mode"
                    : c.no_bucket != 0 && c.no_bucket != 1                        ? "no_bucket"
                    : c.no_direct != 0 && c.no_direct != 1                        ? "no_direct"
                    : c.grid < 0 || c.grid > GPU_MAX_GRID                         ? "grid"
                    : c.order < GPU_ORDER_ASC || c.order > GPU_ORDER_SHUFFLE      ? "order"
                    : c.noise != 0 && c.noise != 1                                ? "noise"
                    : c.delay < 0 || c.delay > GPU_MAX_DELAY                      ? "delay"
                    : c.short_block < 0 || c.short_block > GPU_MAX_SHORT_BLOCK ||
                            (c.short_block & (c.short_block - 1)) != 0            ? "short_block"
                    : c.steal != 0 && c.steal != 1                                ? "steal"
                    : c.bulk < GPU_BULK_AUTO || c.bulk > GPU_BULK_OFF             ? "bulk"
                    : c.hoist != 0 && c.hoist != 1                                ? "hoist"
                    : c.small_tc != 0 && c.small_tc != 1                          ? "small_tc"
                                                                                  : nullptr;
  if (bad)
    return tbe_error(TBE_EINVAL, bad, -1, "gpu_bwd_config.%s holds a value the backward does not "
                     "have (tbe_gpu.h lists them)", bad);
  if (!setup && c.no_bucket != g->no_bucket)
    return tbe_error(TBE_EINVAL, "no_bucket", -1, "no_bucket sized the backward's buffers when it "
                     "was opened; it cannot change afterwards");
  dev_bwd &w = g->w;
  if (!setup && c.no_direct != g->no_direct)
    return tbe_error(TBE_EINVAL, "no_direct", -1, "no_direct sized the backward's buffers when it "
                     "was opened; it cannot change afterwards");
  if (c.small_tc && w.opt.kind != REF_OPT_ROWWISE_ADAGRAD)
    return tbe_error(TBE_EINVAL, "small_tc", -1, "gpu_bwd_config.small_tc updates rows with "
                     "row-wise Adagrad only; this backward was opened with another optimizer");
  if (!setup && c.small_tc && !g->tc_open)
    return tbe_error(TBE_EINVAL, "small_tc", -1, "small_tc sized the backward's buffers (the "
                     "saved counts, the segments' partials) when it was opened; open the "
                     "backward with it to turn it on later");
  if (c.short_block && c.steal)
    return tbe_error(TBE_EINVAL, "short_block", -1, "gpu_bwd_config.short_block orders the "
                     "short tier's grid-stride loop; with steal the short tier takes its runs "
                     "from a counter: set one of them");
  if (c.bulk == GPU_BULK_ON && !w.atomic)
    return tbe_error(TBE_EINVAL, "bulk", -1, "gpu_bwd_config.bulk is a way of adding the atomic "
                     "combine's partials; this backward was opened with the deterministic combine");
  g->no_bucket = c.no_bucket;
  g->no_direct = c.no_direct;
  w.bucket = !c.no_bucket;
  w.short_width = c.short_width;
  w.long_width = c.long_width;
  w.grid = c.grid;
  w.order = c.order;
  w.delay = (uint32_t)c.delay;
  w.steal = c.steal;
  w.short_block = c.short_block;
  w.bulk = c.bulk == GPU_BULK_ON || (c.bulk == GPU_BULK_AUTO && w.atomic);
  g->fused = c.long_mode == GPU_LONG_FUSED;
  g->noise = c.noise;
  g->hoist = c.hoist;
  g->small_tc = c.small_tc;
  if (!c.small_tc)
    w.tc_ok = nullptr;
  return tbe_ok();
}

/* bwd.small_tc's buffers: the tables it may ever take (ref_small_tc_tables with every feature
 * that the small forward path can take), their segments in ref/backward_small.c's order, the
 * counts' rows of their features, the partials and touched rows. */
static tbe_status small_setup(gpu_bwd *g, const tbe_batch *h, const tbe_layout *l,
                              const ref_bwd_config *cfg, const int64_t *rows_cumsum)
{
  dev_bwd &w = g->w;
  std::vector<unsigned char> elig(h->T), tabs(h->num_tables);
  for (int32_t t = 0; t < h->T; t++)
    elig[t] = (unsigned char)ref_small_eligible(h, t);
  ref_small_tc_tables(h, cfg, elig.data(), tabs.data());
  std::vector<bwd_small_table> tables;
  std::vector<bwd_small_seg> segs;
  g->counts_base.assign(h->T, -1);
  int64_t crows = 0;
  for (int32_t j = 0; j < h->num_tables; j++) {
    if (!tabs[j])
      continue;
    bwd_small_table tb = {h->E[j], rows_cumsum[j], h->table_offset[j], j, h->D[j],
                          (int32_t)segs.size(), 0};
    for (int32_t t = 0; t < h->T; t++) {
      if (h->feature_table_map[t] != j)
        continue;
      g->counts_base[t] = crows;
      for (int64_t b0 = l->B_offsets[t]; b0 < l->B_offsets[t + 1]; b0 += REF_SMALL_SEG)
        segs.push_back({b0, crows + b0 - l->B_offsets[t],
                        (int32_t)std::min<int64_t>(REF_SMALL_SEG, l->B_offsets[t + 1] - b0),
                        (int32_t)tables.size()});
      crows += l->B_offsets[t + 1] - l->B_offsets[t];
    }
    tb.nseg = (int32_t)segs.size() - tb.seg0;
    tables.push_back(tb);
  }
  void *p;
  STATUS_TRY(g->arena.alloc((size_t)h->num_tables, (void **)&g->tc_plan));
  STATUS_TRY(g->arena.alloc((size_t)h->num_tables, (void **)&g->tc_ok));
  GPU_TRY(cudaMemset(g->tc_plan, 0, (size_t)h->num_tables));
  g->plan_host.assign(h->num_tables, 0);
  STATUS_TRY(bwd_alloc(g, tbe_mul_size((size_t)crows, REF_SMALL_MAX_E), sizeof(uint16_t), &p));
  g->tc_counts = (uint16_t *)p;
  STATUS_TRY(g->arena.upload(segs.data(), sizeof(bwd_small_seg) * segs.size(), &p));
  w.tc_segs = (const bwd_small_seg *)p;
  STATUS_TRY(g->arena.upload(tables.data(), sizeof(bwd_small_table) * tables.size(), &p));
  w.tc_tables = (const bwd_small_table *)p;
  STATUS_TRY(bwd_alloc(g, tbe_mul_size(segs.size(), (size_t)REF_SMALL_MAX_E * 128),
                       sizeof(float), &p));
  w.tc_part = (float *)p;
  STATUS_TRY(bwd_alloc(g, tables.size(), REF_SMALL_MAX_E, &p));
  w.tc_touched = (unsigned char *)p;
  w.tc_plan = g->tc_plan;
  w.tc_counts = g->tc_counts;
  w.tc_nseg = (int32_t)segs.size();
  w.tc_ntables = (int32_t)tables.size();
  g->tables = tabs;
  g->tc_open = 1;
  return tbe_ok();
}

/* host_taken from the host's batch h and grad_output (small_setup's tables). */
static tbe_status small_host_taken(gpu_bwd *g, const tbe_batch *h, const tbe_layout *l,
                                   const ref_bwd_config *cfg, const void *grad_output)
{
  g->host_taken.assign(h->num_tables, 0);
  return ref_small_tc_taken_from(h, l, cfg, grad_output, g->tables.data(), g->host_taken.data());
}

static tbe_status bwd_setup(gpu_bwd *g, const tbe_batch *h, const tbe_layout *l,
                            const dev_batch &b, const ref_bwd_config *cfg,
                            const gpu_bwd_config *gc, const void *grad_output,
                            const float *momentum)
{
  dev_bwd &w = g->w;
  const int64_t N = h->N;
  if (N > INT32_MAX)
    return tbe_error(TBE_EINVAL, "N", -1, "the GPU backward takes at most 2^31-1 lookups (%lld)",
                     (long long)N);
  w.b = b;
  w.weights = const_cast<void *>(b.weights);
  w.clip = cfg->clip;
  w.threshold = (int32_t)std::min<int64_t>(cfg->threshold, INT32_MAX);
  w.chunk = (int32_t)std::min<int64_t>(cfg->chunk, INT32_MAX);
  w.short_below = bwd_short_below(w.threshold, w.chunk);
  w.atomic = cfg->combine == REF_COMBINE_ATOMIC;
  const ref_opt_config &o = cfg->opt;
  w.opt = {o.kind, o.wd, o.lr, o.eps, o.lambda, o.sr, (uint32_t)o.seed, (uint32_t)(o.seed >> 32),
           o.step};
  g->h = h;
  STATUS_TRY(bwd_config(g, gc, true));
  w.order_key = cfg->opt.seed ^ 0x6f72646572ull; /* the case seed's, apart from Philox's use */
  w.max_D = l->max_D;
  w.vec = 4;
  for (int32_t j = 0; j < h->num_tables; j++)
    if (h->D[j] % 4)
      w.vec = 1; /* vector loads need every row, slice and table to start at a multiple of 4 */

  std::vector<int64_t> rows_cumsum(h->num_tables + 1, 0);
  for (int32_t j = 0; j < h->num_tables; j++)
    rows_cumsum[j + 1] = rows_cumsum[j] + h->E[j];
  g->rows = rows_cumsum[h->num_tables];
  w.sentinel = g->rows;
  w.key64 = g->rows > INT32_MAX;
  int bits = 1;
  while (bits < 64 && (w.sentinel >> bits) != 0)
    bits++;
  g->t.end_bit = bits;
  void *p;
  STATUS_TRY(bwd_alloc(g, rows_cumsum.size(), sizeof(int64_t), &p));
  GPU_TRY(cudaMemcpy(p, rows_cumsum.data(), sizeof(int64_t) * rows_cumsum.size(),
                     cudaMemcpyHostToDevice));
  w.rows_cumsum = (const int64_t *)p;
  if (g->small_tc) {
    STATUS_TRY(small_setup(g, h, l, cfg, rows_cumsum.data()));
    STATUS_TRY(small_host_taken(g, h, l, cfg, grad_output));
  }

  /* the transpose */
  const size_t ksz = w.key64 ? 8 : 4;
  for (int i = 0; i < 2; i++) {
    STATUS_TRY(bwd_alloc(g, (size_t)N, ksz, &g->t.keys[i]));
    STATUS_TRY(bwd_alloc(g, (size_t)N, 4, (void **)&g->t.pos[i]));
  }
  STATUS_TRY(bwd_alloc(g, (size_t)N, ksz, &g->t.run_key));
  STATUS_TRY(bwd_alloc(g, (size_t)N, 4, (void **)&g->t.run_len));
  STATUS_TRY(bwd_alloc(g, (size_t)N, 4, (void **)&g->t.run_start));
  w.val_bag = h->pool != TBE_POOL_NONE && !h->per_sample_weights;
  w.B = h->R ? 0 : h->B;
  if (h->per_sample_weights)
    STATUS_TRY(bwd_alloc(g, (size_t)N, 4, (void **)&w.bag_of_pos));
  if (w.key64)
    STATUS_TRY(gpu_transpose_bytes<uint64_t>(N, bits, &g->t.temp_bytes));
  else
    STATUS_TRY(gpu_transpose_bytes<uint32_t>(N, bits, &g->t.temp_bytes));
  STATUS_TRY(g->arena.alloc(g->t.temp_bytes, &g->t.temp));

  /* direct: every table as wide as table 0 and right after the one before it */
  bool direct = !g->no_direct && h->num_tables > 0;
  for (int32_t j = 0; j < h->num_tables && direct; j++)
    direct = h->D[j] == h->D[0] &&
             h->table_offset[j] == h->table_offset[0] + rows_cumsum[j] * h->D[0];
  w.direct_D = direct ? h->D[0] : 0;
  w.direct_base = h->table_offset[0];
  /* the run lists: bucket k holds at most min(N, rows of the tables in it) short runs (direct:
   * none is written, but short_cap still bounds the short tier's grid) */
  std::vector<int64_t> bucket_rows(BWD_BUCKETS, 0);
  for (int32_t j = 0; j < h->num_tables; j++)
    bucket_rows[w.bucket ? bucket_of(h->D[j]) : bucket_of(w.max_D)] += h->E[j];
  w.short_base[0] = 0;
  for (int k = 0; k < BWD_BUCKETS; k++) {
    g->short_cap[k] = std::min<int64_t>(N, bucket_rows[k]);
    w.short_base[k + 1] = w.short_base[k] + g->short_cap[k];
  }
  if (!direct) {
    STATUS_TRY(bwd_alloc(g, (size_t)w.short_base[BWD_BUCKETS], sizeof(bwd_run), &p));
    w.shorts = (bwd_run *)p;
  }
  /* bwd.steal's short batches (bwd_steal_range; allocated whether or not it is on, since
   * gpu_bwd_configure may turn it on): bucket k's list holds at most `items` runs (direct: the
   * encode's, at most N), each batch at least one, and an item opens a batch only as the first
   * of its tile's segment (one per tile), at a multiple of batch_runs[k] within it, or where a
   * multiple of BWD_BATCH_ENTRIES below N lies between its run's start and the one before */
  const int64_t tiles = (N + CLS_BLOCK - 1) / CLS_BLOCK;
  w.batch_base[0] = 0;
  for (int k = 0; k < BWD_BUCKETS; k++) {
    bwd_dispatch(w.vec, k, [&](auto vec, auto kk) {
      w.batch_runs[k] = BWD_SHORT_BATCH * (32 / bwd_short_shape<decltype(vec)::value,
                                                          decltype(kk)::value>::W);
    });
    const int64_t items = direct && g->short_cap[k] ? N : g->short_cap[k];
    w.batch_base[k + 1] = w.batch_base[k] +
                          std::min<int64_t>(items, tiles + items / w.batch_runs[k] +
                                                       N / BWD_BATCH_ENTRIES);
  }
  STATUS_TRY(bwd_alloc(g, (size_t)w.batch_base[BWD_BUCKETS], sizeof(bwd_batch), &p));
  w.batches = (bwd_batch *)p;
  w.long_cap = std::min<int64_t>(N / w.short_below, g->rows);
  w.chunk_cap = std::min<int64_t>(N, N / w.chunk + w.long_cap);
  STATUS_TRY(bwd_alloc(g, (size_t)w.long_cap, sizeof(bwd_long), &p));
  w.longs = (bwd_long *)p;
  STATUS_TRY(bwd_alloc(g, (size_t)w.long_cap, sizeof(int32_t), &p));
  w.countdown = (int32_t *)p;
  STATUS_TRY(bwd_alloc(g, (size_t)w.chunk_cap, sizeof(bwd_chunk), &p));
  w.chunks = (bwd_chunk *)p;
  STATUS_TRY(bwd_alloc(g, tbe_mul_size((size_t)(w.atomic ? w.long_cap : w.chunk_cap),
                                    (size_t)w.max_D), w.atomic ? sizeof(double) : sizeof(float), &p));
  if (w.atomic)
    w.acc = (double *)p;
  else
    w.part = (float *)p;
  STATUS_TRY(g->arena.alloc(sizeof(bwd_counts), &p));
  w.counts = (bwd_counts *)p;

  /* inputs: grad_output, momentum, and the pristine weights every call starts from */
  const size_t out_bytes = tbe_mul_size((size_t)l->out_elems, tbe_dtype_size(h->out_dtype));
  STATUS_TRY(g->arena.alloc(out_bytes, &p));
  GPU_TRY(cudaMemcpy(p, grad_output, out_bytes, cudaMemcpyHostToDevice));
  w.grad = p;
  g->weight_bytes = tbe_dtype_size(h->wdtype) * (size_t)h->table_offset[h->num_tables];
  STATUS_TRY(g->arena.alloc(g->weight_bytes, &g->pristine_weights));
  GPU_TRY(cudaMemcpy(g->pristine_weights, h->weights, g->weight_bytes, cudaMemcpyHostToDevice));
  if (momentum) {
    STATUS_TRY(bwd_alloc(g, (size_t)g->rows, sizeof(float), (void **)&g->pristine_momentum));
    GPU_TRY(cudaMemcpy(g->pristine_momentum, momentum, sizeof(float) * (size_t)g->rows,
                       cudaMemcpyHostToDevice));
    STATUS_TRY(bwd_alloc(g, (size_t)g->rows, sizeof(float), (void **)&w.momentum));
  }
  if (h->per_sample_weights)
    STATUS_TRY(bwd_alloc(g, (size_t)N, sizeof(float), (void **)&w.psw_grad));
  for (cudaEvent_t &e : g->ev)
    GPU_TRY(cudaEventCreate(&e));
  for (cudaEvent_t &e : g->hoist_ev)
    GPU_TRY(cudaEventCreate(&e));
  return tbe_ok();
}

tbe_status gpu_bwd_open(const tbe_batch *h, const tbe_layout *l, const dev_batch &b,
                        const ref_bwd_config *cfg, const gpu_bwd_config *gc,
                        const void *grad_output, const float *momentum, gpu_bwd **out)
{
  *out = nullptr;
  if (cfg->opt.kind == REF_OPT_ROWWISE_ADAGRAD && !momentum)
    return tbe_error(TBE_EINVAL, "momentum", -1, "row-wise Adagrad needs the momentum array");
  gpu_bwd *g = new gpu_bwd();
  memset(&g->w, 0, sizeof g->w);
  memset(&g->t, 0, sizeof g->t);
  memset(g->ev, 0, sizeof g->ev);
  memset(g->hoist_ev, 0, sizeof g->hoist_ev);
  g->pristine_weights = nullptr;
  g->pristine_momentum = nullptr;
  g->tc_plan = g->tc_ok = nullptr;
  g->tc_counts = nullptr;
  g->tc_open = 0;
  g->tc_all = false;
  tbe_status st = bwd_setup(g, h, l, b, cfg, gc, grad_output, momentum);
  if (st.code != TBE_OK) {
    delete g;
    return st;
  }
  *out = g;
  return tbe_ok();
}

void gpu_bwd_close(gpu_bwd *g) { delete g; }

tbe_status gpu_bwd_configure(gpu_bwd *g, const gpu_bwd_config *gc)
{
  return bwd_config(g, gc, false);
}

tbe_status gpu_bwd_noise(gpu_bwd *g)
{
  return g->noise ? gpu_noise_launch(&g->noise_kernel) : tbe_ok();
}

tbe_status gpu_bwd_restore(gpu_bwd *g, cudaStream_t stream)
{
  GPU_TRY(cudaMemcpyAsync(g->w.weights, g->pristine_weights, g->weight_bytes,
                          cudaMemcpyDeviceToDevice, stream));
  if (g->w.momentum)
    GPU_TRY(cudaMemcpyAsync(g->w.momentum, g->pristine_momentum, sizeof(float) * (size_t)g->rows,
                            cudaMemcpyDeviceToDevice, stream));
  return tbe_ok();
}

tbe_status gpu_bwd_upload(gpu_bwd *g, const tbe_batch *h, const tbe_layout *l,
                          const void *grad_output, const float *momentum)
{
  GPU_TRY(cudaMemcpy(const_cast<void *>(g->w.grad), grad_output,
                     (size_t)l->out_elems * tbe_dtype_size(h->out_dtype), cudaMemcpyHostToDevice));
  GPU_TRY(cudaMemcpy(g->pristine_weights, h->weights, g->weight_bytes, cudaMemcpyHostToDevice));
  if (momentum && g->pristine_momentum)
    GPU_TRY(cudaMemcpy(g->pristine_momentum, momentum, sizeof(float) * (size_t)g->rows,
                       cudaMemcpyHostToDevice));
  if (g->tc_open) {
    ref_bwd_config c = {}; /* ref_small_tc_taken_from reads only the clip */
    c.clip = g->w.clip;
    STATUS_TRY(small_host_taken(g, h, l, &c, grad_output));
    for (int32_t t = 0; t < h->T; t++) /* until the next plan: no table may leave the path */
      g->tc_all = g->tc_all && g->host_taken[h->feature_table_map[t]];
  }
  return tbe_ok();
}

/* The metadata's part of bwd_counts: the fields before steal_short (the classification's
 * counters and the encode's run count), zeroed before the transpose. The steal counters after
 * them belong to the tiers and are zeroed by every launch of the tiers (gpu_bwd_enqueue), so a
 * backward on hoisted metadata starts its stealing from batch 0 too. */
static const size_t METADATA_COUNTS = offsetof(bwd_counts, steal_short);

/* Enqueues the metadata on stream: the counts zeroed, the transpose (keys, sort, encode, scan;
 * it sets w.pos and the run arrays) and the classification into the run lists; ev[0..2]
 * recorded around its parts when timed. Reads the bounds-checked indices and offsets, so the
 * forward's kernels (the fused check repairs inside them) must be before it on stream. */
static tbe_status bwd_metadata(gpu_bwd *g, const dev_bounds *fatal_state, bool timed,
                               cudaStream_t stream)
{
  dev_bwd &w = g->w;
  if (timed)
    GPU_TRY(cudaEventRecord(g->ev[0], stream));
  if (w.tc_ok) /* before the keys, which read which tables it takes */
    STATUS_TRY(gpu_bwd_small_check(w, stream));
  GPU_TRY(cudaMemsetAsync(w.counts, 0, METADATA_COUNTS, stream));
  /* bwd.small_tc takes every table (tc_all): no run is left, the zeroed counts say so */
  const bool none = w.tc_ok && g->tc_all;
  if (w.b.N > 0 && !none) {
    if (w.key64)
      STATUS_TRY(gpu_transpose<uint64_t>(w, g->t, fatal_state, stream));
    else
      STATUS_TRY(gpu_transpose<uint32_t>(w, g->t, fatal_state, stream));
  }
  if (timed)
    GPU_TRY(cudaEventRecord(g->ev[1], stream));
  if (w.b.N > 0 && !none) {
    const unsigned blocks =
        (unsigned)std::min<int64_t>((w.b.N + CLS_BLOCK - 1) / CLS_BLOCK, gpu_bwd_max_blocks());
    if (w.direct_D)
      classify_kernel<true><<<blocks, CLS_BLOCK, 0, stream>>>(w);
    else
      classify_kernel<false><<<blocks, CLS_BLOCK, 0, stream>>>(w);
    GPU_TRY(cudaGetLastError());
  }
  if (timed)
    GPU_TRY(cudaEventRecord(g->ev[2], stream));
  return tbe_ok();
}

int gpu_bwd_hoist(const gpu_bwd *g) { return g->hoist; }

int gpu_bwd_small_all(const gpu_bwd *g) { return g->w.tc_ok && g->tc_all; }

uint16_t *gpu_bwd_small_counts(const gpu_bwd *g, const int64_t **base)
{
  *base = g->small_tc ? g->counts_base.data() : nullptr;
  return g->small_tc ? g->tc_counts : nullptr;
}

tbe_status gpu_bwd_small_plan(gpu_bwd *g, const unsigned char *small, tbe_bounds_mode mode,
                              cudaStream_t stream)
{
  if (!g->small_tc)
    return tbe_ok();
  const tbe_batch *h = g->h;
  ref_bwd_config c = {}; /* ref_small_tc_tables reads only the optimizer's kind */
  c.opt.kind = g->w.opt.kind;
  std::vector<unsigned char> tabs(h->num_tables);
  ref_small_tc_tables(h, &c, small, tabs.data());
  if (tabs != g->plan_host) { /* only when it changes: never inside a capture */
    g->plan_host = tabs;        /* the copy reads it after this returns: a member, kept */
    GPU_TRY(cudaMemcpyAsync(g->tc_plan, g->plan_host.data(), tabs.size(),
                            cudaMemcpyHostToDevice, stream));
  }
  const bool any = std::find(tabs.begin(), tabs.end(), 1) != tabs.end();
  g->w.tc_ok = any ? g->tc_ok : nullptr;
  /* the device's check then clears no table: the same rule on the same offsets and G */
  g->tc_all = any && mode == TBE_BOUNDS_NONE;
  for (int32_t t = 0; t < h->T; t++) {
    const int32_t j = h->feature_table_map[t];
    g->tc_all = g->tc_all && tabs[j] && g->host_taken[j];
  }
  return tbe_ok();
}

tbe_status gpu_bwd_hoisted_metadata(gpu_bwd *g, const dev_bounds *fatal_state,
                                    cudaStream_t stream)
{
  GPU_TRY(cudaEventRecord(g->hoist_ev[0], stream));
  STATUS_TRY(bwd_metadata(g, fatal_state, false, stream));
  GPU_TRY(cudaEventRecord(g->hoist_ev[1], stream));
  return tbe_ok();
}

tbe_status gpu_bwd_enqueue(gpu_bwd *g, const dev_bounds *fatal_state, int timed, int hoisted,
                           cudaStream_t stream)
{
  dev_bwd &w = g->w;
  g->timed = timed != 0;
  g->hoisted = hoisted != 0;
  w.launch++;
  /* Untimed (before the first event): every deterministic partial slot starts the launch as
   * NaN (all bits set). A slot the combine reads before its chunk program's store landed then
   * gives NaN, not the previous launch's identical bits, which would hide the race. Here, not in
   * gpu_bwd_restore, so that every launch gets it (also a CUDA graph's). The atomic fp64 rows are
   * zeroed per launch by expand_kernel. The steal counters likewise, for the same reason: every
   * launch of the tiers, also one on hoisted metadata, hands out its batches from 0. */
  if (!w.atomic && w.long_cap > 0)
    GPU_TRY(cudaMemsetAsync(w.part, 0xFF, sizeof(float) * (size_t)w.chunk_cap * (size_t)w.max_D,
                            stream));
  GPU_TRY(cudaMemsetAsync((char *)w.counts + METADATA_COUNTS, 0,
                          sizeof(bwd_counts) - METADATA_COUNTS, stream));
  if (!hoisted)
    STATUS_TRY(bwd_metadata(g, fatal_state, g->timed, stream));
  else if (timed) /* the metadata ran in the forward: its parts here take no time */
    for (int i = 0; i < 3; i++)
      GPU_TRY(cudaEventRecord(g->ev[i], stream));
  if (w.psw_grad) {
    GPU_TRY(cudaMemsetAsync(w.psw_grad, 0, sizeof(float) * (size_t)w.b.N, stream));
    if (w.b.N > 0) {
      const unsigned blocks =
          (unsigned)std::min<int64_t>((w.b.N + 3) / 4, gpu_bwd_max_blocks());
      psw_kernel<<<blocks, 128, 0, stream>>>(w, fatal_state);
      GPU_TRY(cudaGetLastError());
    }
  }
  if (timed)
    GPU_TRY(cudaEventRecord(g->ev[3], stream));
  if (w.opt.kind != REF_OPT_NONE && w.b.N > 0) {
    for (int k = 0; k < BWD_BUCKETS; k++)
      STATUS_TRY(gpu_bwd_short(w, k, g->short_cap[k], stream));
    if (timed)
      GPU_TRY(cudaEventRecord(g->ev[4], stream));
    STATUS_TRY(gpu_bwd_long(w, g->fused, stream));
  } else if (timed) {
    GPU_TRY(cudaEventRecord(g->ev[4], stream));
  }
  if (timed)
    GPU_TRY(cudaEventRecord(g->ev[5], stream));
  if (w.tc_ok)
    STATUS_TRY(gpu_bwd_small(w, fatal_state, stream));
  if (timed)
    GPU_TRY(cudaEventRecord(g->ev[6], stream));
  return tbe_ok();
}

tbe_status gpu_bwd_stats_get(gpu_bwd *g, gpu_bwd_stats *st)
{
  memset(st, 0, sizeof *st);
  if (g->timed) {
    GPU_TRY(cudaEventSynchronize(g->ev[6]));
    float ms[6];
    for (int i = 0; i < 6; i++)
      GPU_TRY(cudaEventElapsedTime(&ms[i], g->ev[i], g->ev[i + 1]));
    if (g->hoisted) { /* zero by the rule, not by measuring two events back to back */
      ms[0] = ms[1] = 0;
      float hoist_ms;
      GPU_TRY(cudaEventElapsedTime(&hoist_ms, g->hoist_ev[0], g->hoist_ev[1]));
      st->hoist_ms = hoist_ms;
    }
    st->sort_ms = ms[0];
    st->classify_ms = ms[1];
    st->psw_ms = ms[2];
    st->short_ms = ms[3];
    st->long_ms = ms[4];
    st->small_ms = ms[5];
    st->ms = ms[0] + ms[1] + ms[2] + ms[3] + ms[4] + ms[5];
  }
  st->hoisted = g->hoisted;
  GPU_TRY(cudaDeviceSynchronize());
  bwd_counts c;
  GPU_TRY(cudaMemcpy(&c, g->w.counts, sizeof c, cudaMemcpyDeviceToHost));
  st->runs = c.num_runs;
  st->long_runs = c.longs;
  st->chunks = c.chunks;
  if (g->w.tc_ok) {
    std::vector<unsigned char> ok(g->h->num_tables);
    GPU_TRY(cudaMemcpy(ok.data(), g->w.tc_ok, ok.size(), cudaMemcpyDeviceToHost));
    for (unsigned char x : ok)
      st->small_tc_tables += x;
  }
  return tbe_ok();
}

tbe_status gpu_bwd_results(gpu_bwd *g, const tbe_batch *h, gpu_bwd_result *r)
{
  memset(r, 0, sizeof *r);
  const dev_bwd &w = g->w;
  STATUS_TRY(gpu_bwd_stats_get(g, &r->stats));
  r->weights = malloc(g->weight_bytes + 1);
  r->momentum = w.momentum ? (float *)malloc(sizeof(float) * (size_t)g->rows + 1) : nullptr;
  r->psw_grad = w.psw_grad ? (float *)malloc(sizeof(float) * (size_t)h->N + 1) : nullptr;
  r->small_tc_mask = (unsigned char *)calloc((size_t)h->T + 1, 1);
  if (!r->weights || (w.momentum && !r->momentum) || (w.psw_grad && !r->psw_grad) ||
      !r->small_tc_mask) {
    gpu_bwd_result_free(r);
    return tbe_error(TBE_ENOMEM, "gpu", -1, "cannot allocate host copies of the backward");
  }
  GPU_TRY(cudaMemcpy(r->weights, w.weights, g->weight_bytes, cudaMemcpyDeviceToHost));
  if (w.momentum)
    GPU_TRY(cudaMemcpy(r->momentum, w.momentum, sizeof(float) * (size_t)g->rows,
                       cudaMemcpyDeviceToHost));
  if (w.psw_grad)
    GPU_TRY(cudaMemcpy(r->psw_grad, w.psw_grad, sizeof(float) * (size_t)h->N,
                       cudaMemcpyDeviceToHost));
  if (w.tc_ok) {
    std::vector<unsigned char> ok(h->num_tables);
    GPU_TRY(cudaMemcpy(ok.data(), w.tc_ok, ok.size(), cudaMemcpyDeviceToHost));
    for (int32_t t = 0; t < h->T; t++)
      r->small_tc_mask[t] = ok[h->feature_table_map[t]];
  }
  return tbe_ok();
}

extern "C" void gpu_bwd_result_free(gpu_bwd_result *r)
{
  free(r->weights);
  free(r->momentum);
  free(r->psw_grad);
  free(r->small_tc_mask);
  memset(r, 0, sizeof *r);
}
