/* backward.c: the CPU backward + optimizer (backward.h), the driver: effective gradient,
 * transpose, per-sample-weight gradients, each run to its row gradient (short runs in
 * backward_short.c, long in backward_long.c), one update per unique row. Twin of
 * gpu/backward.cu; not the exact twin (backward_exact.c). The GPU must equal this bit for bit.
 *
 * Accumulation order: as backward_impl.h states for the row gradients (sequential from +0 per
 * run, or per chunk with the partials added in ascending order), and optimizer.h for the
 * updates. A per-sample-weight gradient is ref_lane_dot(G row of the bag, row of weights before
 * the update), the 32-lane order of section 5 step 2. Runs are independent and each is computed
 * by one thread in this order, so OpenMP over runs gives the same bits for any thread count.
 *
 * Work is done in items of ITEM_RUNS runs, one thread each: the item's row gradients go to the
 * thread's buffer (the sums phase) while its rows' weights and momentum are prefetched, then its
 * rows are updated (the optimizer phase), so the two are timed apart and the gradients are still
 * in cache when the update reads them. The sums prefetch the G rows of the entries ahead, across
 * run ends (backward_short.c).
 */
#include "backward_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "half.h"
#include "speed.h"

#define ITEM_RUNS 64 /* runs per work item: their row gradients stay in a thread's cache */

void ref_bwd_config_default(ref_bwd_config *c)
{
  memset(c, 0, sizeof *c);
  c->opt.kind = REF_OPT_NONE;
  c->opt.lr = 0.01f;
  c->opt.eps = 1e-8f;
  c->opt.wd = REF_WD_NONE;
  c->threshold = REF_BWD_THRESHOLD;
  c->chunk = REF_BWD_CHUNK;
  c->combine = REF_COMBINE_DETERMINISTIC;
}

int64_t ref_bwd_rows(const tbe_batch *b)
{
  int64_t n = 0;
  for (int32_t j = 0; j < b->num_tables; j++)
    n += b->E[j];
  return n;
}

static tbe_status check_config(const ref_bwd_config *c)
{
  const ref_opt_config *o = &c->opt;
  if (o->kind > REF_OPT_ROWWISE_ADAGRAD || o->wd > REF_WD_DECOUPLE ||
      c->combine > REF_COMBINE_ATOMIC)
    return tbe_error(TBE_EINVAL, "opt", -1, "unknown optimizer, weight decay or combine mode");
  if (c->threshold < 1 || c->chunk < 1)
    return tbe_error(TBE_EINVAL, c->threshold < 1 ? "bwd.threshold" : "bwd.chunk", -1,
                     "threshold and chunk must be at least 1 (got %lld and %lld)",
                     (long long)c->threshold, (long long)c->chunk);
  if (!(c->clip >= 0.0f) || isinf(c->clip))
    return tbe_error(TBE_EINVAL, "clip", -1, "clip must be finite and >= 0 (0: off)");
  const char *bad = !isfinite(o->lr) ? "lr" : !isfinite(o->eps) ? "eps"
                    : !isfinite(o->lambda) ? "lambda" : NULL;
  if (bad)
    return tbe_error(TBE_EINVAL, bad, -1, "%s must be finite", bad);
  return tbe_ok();
}

static double now_ms(void) { return omp_get_wtime() * 1e3; }

void ref_bwd_build_g(const tbe_batch *b, const tbe_layout *l, float clip, const void *go, float *g)
{
  const float *f32 = go;
  const uint16_t *h = go;
  tbe_dtype t = b->out_dtype;
#pragma omp parallel for schedule(static) if (l->out_elems > REF_PAR_MIN)
  for (int64_t i = 0; i < l->out_elems; i++) {
    float v = t == TBE_FP32 ? f32[i] : t == TBE_FP16 ? ref_half_to_float(h[i])
                                                     : ref_bf16_to_float(h[i]);
    if (clip > 0.0f)
      v = v > clip ? clip : v < -clip ? -clip : v;
    g[i] = v;
  }
  if (b->pool != TBE_POOL_MEAN)
    return;
#pragma omp parallel for schedule(static) if (l->total_B > REF_PAR_MIN)
  for (int64_t i = 0; i < l->total_B; i++) {
    int64_t L = tbe_iget(b->offsets, b->itype, i + 1) - tbe_iget(b->offsets, b->itype, i);
    if (L <= 0)
      continue;
    float s = 1.0f / (float)L;
    int64_t D = l->D_offsets[l->bag_feature[i] + 1] - l->D_offsets[l->bag_feature[i]];
    for (int64_t d = 0; d < D; d++)
      g[l->bag_out[i] + d] = g[l->bag_out[i] + d] * s;
  }
}

tbe_status ref_bwd_work_init(ref_bwd_work *w, const tbe_batch *b, const tbe_layout *l,
                             const ref_bwd_config *cfg, const void *grad_output,
                             ref_bwd_stats *stats)
{
  memset(w, 0, sizeof *w);
  tbe_status st = check_config(cfg);
  if (st.code)
    return st;
  w->b = b;
  w->l = l;
  w->cfg = cfg;
  double t0 = now_ms();
  w->g = ref_alloc_big(sizeof(float) * (size_t)l->out_elems);
  if (!w->g)
    return tbe_error(TBE_ENOMEM, "grad_output", -1, "cannot allocate %lld fp32 gradients",
                     (long long)l->out_elems);
  ref_bwd_build_g(b, l, cfg->clip, grad_output, w->g);
  double t1 = now_ms();
  st = ref_transpose_build(b, l, &w->tr);
  if (stats) {
    stats->prep_ms += t1 - t0;
    stats->sort_ms += now_ms() - t1;
  }
  if (st.code) {
    free(w->g);
    memset(w, 0, sizeof *w);
  }
  return st;
}

void ref_bwd_work_free(ref_bwd_work *w)
{
  free(w->g);
  ref_transpose_free(&w->tr);
  memset(w, 0, sizeof *w);
}

int ref_bwd_is_long(const ref_bwd_config *c, int64_t sl) { return sl >= c->threshold; }

void ref_bwd_row_grad(const ref_bwd_work *w, int64_t r, int32_t D, float *g, float *part)
{
  if (ref_bwd_is_long(w->cfg, w->tr.run_start[r + 1] - w->tr.run_start[r]))
    ref_bwd_long_grad(w, r, D, g, part);
  else
    ref_bwd_short_grad(w, r, D, g);
}

/* psw_grad[p] for every position: the lane dot of the bag's G row with the row's weights before
 * the update; 0 at -1 positions and outside the bags. */
static void psw_grads(const ref_bwd_work *w, float *psw_grad)
{
  const tbe_batch *b = w->b;
  const tbe_layout *l = w->l;
  memset(psw_grad, 0, sizeof(float) * (size_t)b->N);
  size_t elem = tbe_dtype_size(b->wdtype);
#pragma omp parallel if (b->N > REF_PAR_MIN)
  {
    float row[TBE_MAX_D];
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < l->total_B; i++) {
      int32_t j = b->feature_table_map[l->bag_feature[i]];
      int32_t D = b->D[j];
      const float *g = w->g + l->bag_out[i];
      int64_t s = tbe_iget(b->offsets, b->itype, i), e = tbe_iget(b->offsets, b->itype, i + 1);
      for (int64_t p = s; p < e; p++) {
        int64_t idx = tbe_iget(b->indices, b->itype, p);
        if (idx == -1)
          continue;
        ref_load_row((const char *)b->weights + (size_t)ref_bwd_weight_at(b, j, idx) * elem,
                     b->wdtype, D, row);
        psw_grad[p] = ref_lane_dot(g, row, D);
      }
    }
  }
}

/* Prefetches, for writing, the weights and momentum of run r (they are read at random). */
static void prefetch_run(const ref_bwd_work *w, int64_t r, size_t elem, const float *momentum)
{
  const tbe_batch *b = w->b;
  int64_t row;
  int32_t j = ref_transpose_table(&w->tr, b, w->l, r, &row);
  const char *at = (const char *)b->weights + (size_t)ref_bwd_weight_at(b, j, row) * elem;
  size_t bytes = (size_t)b->D[j] * elem;
  for (size_t c = 0; c < bytes; c += REF_BWD_CACHE_LINE)
    __builtin_prefetch(at + c, 1, 2);
  __builtin_prefetch(at + bytes - 1, 1, 2); /* a row need not start on a cache line */
  if (momentum)
    __builtin_prefetch(momentum + w->tr.key[w->tr.run_start[r]], 1, 2);
}

/* One work item, runs [r0, r1): their row gradients into grads (max_D floats per run), each
 * run's weights and momentum prefetched as its sum is done, then the rows updated. Adds the
 * two phases' times to *sums_ms and *opt_ms. */
static void item(const ref_bwd_work *w, int64_t r0, int64_t r1, float *grads, float *part,
                 float *momentum, double *sums_ms, double *opt_ms)
{
  const tbe_batch *b = w->b;
  const ref_opt_config *o = &w->cfg->opt;
  size_t elem = tbe_dtype_size(b->wdtype);
  int64_t max_D = w->l->max_D;
  float row[TBE_MAX_D];
  double t0 = now_ms();
  for (int64_t r = r0; r < r1; r++) {
    prefetch_run(w, r, elem, momentum);
    int64_t rr;
    int32_t D = b->D[ref_transpose_table(&w->tr, b, w->l, r, &rr)];
    ref_bwd_row_grad(w, r, D, grads + (r - r0) * max_D, part);
  }
  double t1 = now_ms();
  for (int64_t r = r0; r < r1; r++) {
    int64_t rr;
    int32_t j = ref_transpose_table(&w->tr, b, w->l, r, &rr);
    int32_t D = b->D[j];
    char *dst = (char *)b->weights + (size_t)ref_bwd_weight_at(b, j, rr) * elem;
    uint64_t key = w->tr.key[w->tr.run_start[r]];
    ref_load_row(dst, b->wdtype, D, row);
    ref_opt_update_row(o, D, grads + (r - r0) * max_D, row, momentum ? momentum + key : NULL);
    ref_store_row(o, b->wdtype, row, D, key, dst);
  }
  *sums_ms += t1 - t0;
  *opt_ms += now_ms() - t1;
}

tbe_status ref_backward(tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                        const void *grad_output, float *momentum, float *psw_grad,
                        ref_bwd_stats *stats)
{
  ref_bwd_stats local;
  if (!stats)
    stats = &local;
  memset(stats, 0, sizeof *stats);
  if (cfg->opt.kind == REF_OPT_ROWWISE_ADAGRAD && !momentum)
    return tbe_error(TBE_EINVAL, "momentum", -1, "row-wise Adagrad needs the momentum array");
  ref_bwd_work w;
  tbe_status st = ref_bwd_work_init(&w, b, l, cfg, grad_output, stats);
  if (st.code)
    return st;
  double t0 = now_ms();
  if (b->per_sample_weights && psw_grad)
    psw_grads(&w, psw_grad);
  stats->psw_ms = now_ms() - t0;

  int64_t runs = w.tr.num_runs;
  stats->entries = w.tr.n;
  stats->runs = runs;
  for (int64_t r = 0; r < runs; r++) {
    int64_t sl = w.tr.run_start[r + 1] - w.tr.run_start[r];
    stats->long_runs += ref_bwd_is_long(cfg, sl);
    stats->max_sl = sl > stats->max_sl ? sl : stats->max_sl;
  }
  if (cfg->opt.kind == REF_OPT_NONE || runs == 0) {
    ref_bwd_work_free(&w);
    return tbe_ok();
  }
  int threads = w.tr.n > REF_PAR_MIN ? omp_get_max_threads() : 1;
  size_t per_thread = (size_t)ITEM_RUNS * (size_t)l->max_D + TBE_MAX_D; /* grads, then part */
  float *buf = malloc(sizeof(float) * per_thread * (size_t)threads);
  if (!buf) {
    ref_bwd_work_free(&w);
    return tbe_error(TBE_ENOMEM, "backward", -1, "cannot allocate the row-gradient buffers");
  }
  int64_t items = (runs + ITEM_RUNS - 1) / ITEM_RUNS;
  double sums_ms = 0.0, opt_ms = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sums_ms, opt_ms)
  {
    float *grads = buf + per_thread * (size_t)omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (int64_t k = 0; k < items; k++) {
      int64_t r0 = k * ITEM_RUNS, r1 = r0 + ITEM_RUNS < runs ? r0 + ITEM_RUNS : runs;
      item(&w, r0, r1, grads, grads + (size_t)ITEM_RUNS * (size_t)l->max_D, momentum, &sums_ms,
           &opt_ms);
    }
  }
  stats->sums_ms = sums_ms / threads;
  stats->opt_ms = opt_ms / threads;
  free(buf);
  ref_bwd_work_free(&w);
  return tbe_ok();
}
