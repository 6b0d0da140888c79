/* backward_test.c: the backward + optimizer against a streaming model written apart from it
 * (contributions in position order into per-row accumulators: no sort), on random batches with
 * every option; hand-checked chunk orders; thread-count invariance; untouched rows; and the
 * exact twin: its bound holds for every combine order, is approached, and catches one ulp and
 * one dropped partial among 11,719; the Triton model's declines and its weighted pairing.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_impl.h"
#include "backward_order.h"
#include "half.h"
#include "test_batch.h"
#include "test_util.h"

static uint64_t rng(uint64_t *x)
{
  *x = *x * 6364136223846793005ull + 1442695040888963407ull;
  return *x >> 11;
}

/* A value with a random sign, 24 random significand bits and exponent in [-e, e]. */
static float spread(uint64_t *x, int e)
{
  uint64_t r = rng(x);
  int ex = (int)((r >> 23) % (uint64_t)(2 * e + 1)) - e;
  float v = ldexpf(1.0f + (float)(r & 0x7FFFFF) * 0x1p-23f, ex);
  return (r >> 40) & 1 ? -v : v;
}

static void set_value(void *a, tbe_dtype t, int64_t i, float v)
{
  if (t == TBE_FP32)
    ((float *)a)[i] = v;
  else if (t == TBE_FP16)
    ((uint16_t *)a)[i] = ref_float_to_half(v);
  else
    ((uint16_t *)a)[i] = ref_float_to_bf16(v);
}

static float get_value(const void *a, tbe_dtype t, int64_t i)
{
  if (t == TBE_FP32)
    return ((const float *)a)[i];
  uint16_t h = ((const uint16_t *)a)[i];
  return t == TBE_FP16 ? ref_half_to_float(h) : ref_bf16_to_float(h);
}

/* One backward problem: the batch, its layout, grad_output and the starting momentum. */
typedef struct {
  tbe_batch b;
  tbe_layout l;
  void *grad;
  float *momentum;
  int64_t rows;
} problem;

typedef struct {
  int vbe, weighted, shared, none, pruned;
  tbe_pool pool;
  tbe_dtype wd, od;
  int32_t T, B, maxL;
  int64_t E;       /* rows per table (small: long runs) */
  int32_t D;
} shape;

static void problem_free(problem *p)
{
  free(p->grad);
  free(p->momentum);
  tbe_layout_free(&p->l);
  tbe_batch_free(&p->b);
}

static problem make_problem(uint64_t seed, const shape *sh)
{
  uint64_t x = seed;
  int32_t T = sh->T, R = sh->vbe ? 2 : 0;
  int32_t tables = sh->shared ? (T + 1) / 2 : T;
  int64_t E[16];
  int32_t D[16], map[16], Bv[32];
  for (int32_t j = 0; j < tables; j++) {
    E[j] = sh->E + j;
    D[j] = sh->none ? sh->D : sh->D + j * 3;
  }
  for (int32_t t = 0; t < T; t++)
    map[t] = sh->shared ? (t % 2 ? t / 2 : (tables - 1 - t / 2)) : t;
  int64_t bags = 0;
  for (int32_t i = 0; i < T * R; i++)
    bags += Bv[i] = (int32_t)(rng(&x) % (uint64_t)(sh->B + 1));
  if (!R)
    bags = (int64_t)T * sh->B;
  int64_t *off = malloc(sizeof *off * (size_t)(bags + 1));
  off[0] = 0;
  for (int64_t i = 0; i < bags; i++)
    off[i + 1] = off[i] + (int64_t)(rng(&x) % (uint64_t)(sh->maxL + 1));
  int64_t N = off[bags];
  int64_t *idx = malloc(sizeof *idx * (size_t)(N + 1));
  float *psw = malloc(sizeof *psw * (size_t)(N + 1));
  tbe_layout tmp;
  tb_spec s = {
      .num_tables = tables,
      .E = E,
      .D = D,
      .wdtype = sh->wd,
      .T = T,
      .map = map,
      .B = sh->B,
      .R = R,
      .B_vbe = Bv,
      .itype = TBE_I32,
      .N = N,
      .indices = idx,
      .offsets = off,
      .pool = sh->none ? TBE_POOL_NONE : sh->pool,
      .out_dtype = sh->od,
  };
  memset(idx, 0, sizeof *idx * (size_t)(N + 1));
  problem p;
  memset(&p, 0, sizeof p);
  p.b = tb_build(&s);
  tbe_layout_init(&tmp, &p.b);
  for (int64_t i = 0; i < bags; i++) {
    int64_t Ej = E[map[tmp.bag_feature[i]]];
    for (int64_t q = off[i]; q < off[i + 1]; q++) {
      uint64_t r = rng(&x);
      idx[q] = sh->pruned && r % 9 == 0 ? -1 : r % 4 == 0 ? 0 : (int64_t)((r >> 8) % (uint64_t)Ej);
      psw[q] = spread(&x, 2);
    }
  }
  tbe_layout_free(&tmp);
  tbe_batch_free(&p.b);
  s.psw = sh->weighted ? psw : NULL;
  p.b = tb_build(&s);
  free(off);
  free(idx);
  free(psw);
  int64_t total = p.b.table_offset[tables];
  for (int64_t i = 0; i < total; i++)
    set_value(p.b.weights, sh->wd, i, spread(&x, sh->wd == TBE_FP16 ? 6 : 12));
  tbe_status st = tbe_batch_validate(&p.b);
  CHECK(st.code == TBE_OK, "validate: %s", st.message);
  tbe_layout_init(&p.l, &p.b);
  p.grad = malloc(tbe_dtype_size(sh->od) * (size_t)(p.l.out_elems + 1));
  for (int64_t i = 0; i < p.l.out_elems; i++)
    set_value(p.grad, sh->od, i, spread(&x, sh->od == TBE_FP16 ? 6 : 12));
  p.rows = ref_bwd_rows(&p.b);
  p.momentum = malloc(sizeof(float) * (size_t)(p.rows + 1));
  for (int64_t i = 0; i < p.rows; i++)
    p.momentum[i] = fabsf(spread(&x, 8));
  return p;
}

/* ---------------------------------------------------------------- the streaming model */

/* Contributions in position order into per-row accumulators: a short row sums them all, a long
 * row (SL >= threshold) sums `chunk` at a time from +0 and folds each finished chunk into its
 * total (the first becomes the total). Then the same per-row optimizer and write-back. */
static void model(const problem *p, const ref_bwd_config *cfg, void *weights, float *momentum,
                  float *psw_grad)
{
  const tbe_batch *b = &p->b;
  const tbe_layout *l = &p->l;
  int32_t maxD = l->max_D;
  int64_t rows = p->rows;
  int64_t *rc = malloc(sizeof *rc * (size_t)(b->num_tables + 1));
  rc[0] = 0;
  for (int32_t j = 0; j < b->num_tables; j++)
    rc[j + 1] = rc[j] + b->E[j];
  /* G: widened, clipped, MEAN-scaled */
  float *G = malloc(sizeof(float) * (size_t)(l->out_elems + 1));
  for (int64_t i = 0; i < l->out_elems; i++) {
    float v = get_value(p->grad, b->out_dtype, i);
    if (cfg->clip > 0)
      v = fminf(fmaxf(v, -cfg->clip), cfg->clip);
    G[i] = v;
  }
  int64_t *sl = calloc((size_t)rows + 1, sizeof *sl);
  int64_t *seen = calloc((size_t)rows + 1, sizeof *seen);
  float *total = calloc((size_t)rows * (size_t)maxD + 1, sizeof(float));
  float *part = calloc((size_t)rows * (size_t)maxD + 1, sizeof(float));
  for (int pass = 0; pass < 2; pass++)
    for (int64_t i = 0; i < l->total_B; i++) {
      int32_t t = l->bag_feature[i], j = b->feature_table_map[t], D = b->D[j];
      int64_t s = tbe_iget(b->offsets, b->itype, i), e = tbe_iget(b->offsets, b->itype, i + 1);
      float invL = 1.0f / (float)(e - s);
      for (int64_t q = s; q < e; q++) {
        int64_t idx = tbe_iget(b->indices, b->itype, q);
        if (idx < 0)
          continue;
        int64_t key = rc[j] + idx;
        if (pass == 0) {
          sl[key]++;
          continue;
        }
        const float *g = G + (l->bag_out ? l->bag_out[i] : q * D);
        int long_run = sl[key] >= cfg->threshold;
        int64_t k = seen[key]++;
        float *acc = long_run ? part + key * maxD : total + key * maxD;
        if (long_run && k > 0 && k % cfg->chunk == 0) {
          for (int32_t d = 0; d < D; d++)
            total[key * maxD + d] = k == cfg->chunk ? acc[d] : total[key * maxD + d] + acc[d];
        }
        if (long_run && k % cfg->chunk == 0)
          for (int32_t d = 0; d < D; d++)
            acc[d] = 0.0f;
        for (int32_t d = 0; d < D; d++) {
          float c = b->pool == TBE_POOL_MEAN ? g[d] * invL : g[d];
          acc[d] = b->per_sample_weights ? fmaf(b->per_sample_weights[q], c, acc[d]) : acc[d] + c;
        }
      }
    }
  /* per-sample-weight gradients from the weights before any update */
  if (psw_grad) {
    float row[TBE_MAX_D];
    memset(psw_grad, 0, sizeof(float) * (size_t)b->N);
    for (int64_t i = 0; i < l->total_B; i++) {
      int32_t j = b->feature_table_map[l->bag_feature[i]], D = b->D[j];
      int64_t s = tbe_iget(b->offsets, b->itype, i), e = tbe_iget(b->offsets, b->itype, i + 1);
      for (int64_t q = s; q < e; q++) {
        int64_t idx = tbe_iget(b->indices, b->itype, q);
        if (idx < 0)
          continue;
        for (int32_t d = 0; d < D; d++)
          row[d] = get_value(b->weights, b->wdtype, b->table_offset[j] + idx * D + d);
        psw_grad[q] = ref_lane_dot(G + l->bag_out[i], row, D);
      }
    }
  }
  for (int32_t j = 0; j < b->num_tables && cfg->opt.kind != REF_OPT_NONE; j++)
    for (int64_t r = 0; r < b->E[j]; r++) {
      int64_t key = rc[j] + r;
      if (!sl[key])
        continue;
      int32_t D = b->D[j];
      float *acc = total + key * maxD, w[TBE_MAX_D];
      if (sl[key] >= cfg->threshold)
        for (int32_t d = 0; d < D; d++)
          acc[d] = sl[key] <= cfg->chunk ? part[key * maxD + d] : acc[d] + part[key * maxD + d];
      for (int32_t d = 0; d < D; d++)
        w[d] = get_value(weights, b->wdtype, b->table_offset[j] + r * D + d);
      ref_opt_update_row(&cfg->opt, D, acc, w, momentum + key);
      size_t at = (size_t)(b->table_offset[j] + r * D) * tbe_dtype_size(b->wdtype);
      ref_store_row(&cfg->opt, b->wdtype, w, D, (uint64_t)key, (char *)weights + at);
    }
  free(rc);
  free(G);
  free(sl);
  free(seen);
  free(total);
  free(part);
}

/* ---------------------------------------------------------------- running both */

typedef struct {
  void *weights;
  float *momentum, *psw;
} result;

static void result_free(result *r)
{
  free(r->weights);
  free(r->momentum);
  free(r->psw);
}

static result run_ref(problem *p, const ref_bwd_config *cfg, tbe_status *st)
{
  size_t wbytes = tbe_dtype_size(p->b.wdtype) * (size_t)p->b.table_offset[p->b.num_tables];
  result r = {malloc(wbytes + 1), malloc(sizeof(float) * (size_t)(p->rows + 1)),
              malloc(sizeof(float) * (size_t)(p->b.N + 1))};
  void *keep = p->b.weights;
  memcpy(r.weights, keep, wbytes);
  memcpy(r.momentum, p->momentum, sizeof(float) * (size_t)p->rows);
  p->b.weights = r.weights;
  *st = ref_backward(&p->b, &p->l, cfg, p->grad, r.momentum, p->b.per_sample_weights ? r.psw : NULL,
                     NULL);
  p->b.weights = keep;
  return r;
}

static result run_model(const problem *p, const ref_bwd_config *cfg)
{
  size_t wbytes = tbe_dtype_size(p->b.wdtype) * (size_t)p->b.table_offset[p->b.num_tables];
  result r = {malloc(wbytes + 1), malloc(sizeof(float) * (size_t)(p->rows + 1)),
              malloc(sizeof(float) * (size_t)(p->b.N + 1))};
  memcpy(r.weights, p->b.weights, wbytes);
  memcpy(r.momentum, p->momentum, sizeof(float) * (size_t)p->rows);
  model(p, cfg, r.weights, r.momentum, p->b.per_sample_weights ? r.psw : NULL);
  return r;
}

static int same(const problem *p, const result *a, const result *b, const char *what)
{
  size_t wbytes = tbe_dtype_size(p->b.wdtype) * (size_t)p->b.table_offset[p->b.num_tables];
  int ok = 1;
  if (memcmp(a->weights, b->weights, wbytes)) {
    int64_t n = p->b.table_offset[p->b.num_tables], first = -1, count = 0;
    for (int64_t i = 0; i < n; i++)
      if (get_value(a->weights, p->b.wdtype, i) != get_value(b->weights, p->b.wdtype, i)) {
        count++;
        first = first < 0 ? i : first;
      }
    CHECK(0, "%s: weights differ (%lld elements, first %lld: %a vs %a)", what, (long long)count,
          (long long)first, first < 0 ? 0.0 : (double)get_value(a->weights, p->b.wdtype, first),
          first < 0 ? 0.0 : (double)get_value(b->weights, p->b.wdtype, first));
    ok = 0;
  }
  if (memcmp(a->momentum, b->momentum, sizeof(float) * (size_t)p->rows)) {
    CHECK(0, "%s: momentum differs", what);
    ok = 0;
  }
  if (p->b.per_sample_weights && memcmp(a->psw, b->psw, sizeof(float) * (size_t)p->b.N)) {
    CHECK(0, "%s: psw_grad differs", what);
    ok = 0;
  }
  return ok;
}

static ref_bwd_config config(ref_opt_kind k, ref_wd_mode wd, int64_t threshold, int64_t chunk)
{
  ref_bwd_config c;
  ref_bwd_config_default(&c);
  c.opt.kind = k;
  c.opt.wd = wd;
  c.opt.lr = 0.0625f * 1.1f;
  c.opt.eps = 1e-3f;
  c.opt.lambda = wd ? 0.3f : 0.0f;
  c.threshold = threshold;
  c.chunk = chunk;
  return c;
}

/* Random problems over every option, ref_backward against the model, bit for bit. */
static void test_against_model(void)
{
  int compared = 0;
  for (uint64_t k = 0; k < 96; k++) {
    uint64_t x = 1000 + k;
    shape sh;
    memset(&sh, 0, sizeof sh);
    sh.vbe = rng(&x) % 3 == 0;
    sh.none = !sh.vbe && rng(&x) % 6 == 0;
    sh.pool = sh.none ? TBE_POOL_NONE : rng(&x) % 3 == 0 ? TBE_POOL_MEAN : TBE_POOL_SUM;
    sh.weighted = sh.pool == TBE_POOL_SUM && rng(&x) % 2;
    sh.shared = rng(&x) % 2;
    sh.pruned = rng(&x) % 2;
    sh.wd = (tbe_dtype)(rng(&x) % 3);
    sh.od = (tbe_dtype)(rng(&x) % 3);
    sh.T = 1 + (int32_t)(rng(&x) % 4);
    sh.B = 1 + (int32_t)(rng(&x) % 12);
    sh.maxL = (int)(rng(&x) % 9);
    sh.E = 1 + (int64_t)(rng(&x) % 12);
    sh.D = k % 7 == 0 ? 1 + (int32_t)(rng(&x) % 200) : 1 + (int32_t)(rng(&x) % 40);
    problem p = make_problem(x, &sh);
    ref_bwd_config c = config((ref_opt_kind)(1 + rng(&x) % 2), (ref_wd_mode)(rng(&x) % 3),
                              1 + (int64_t)(rng(&x) % 6), 1 + (int64_t)(rng(&x) % 4));
    if (c.opt.kind == REF_OPT_SGD)
      c.opt.wd = REF_WD_NONE;
    c.opt.sr = sh.wd != TBE_FP32 && rng(&x) % 2;
    c.opt.seed = rng(&x);
    c.opt.step = (uint32_t)rng(&x);
    c.clip = rng(&x) % 3 == 0 ? 0.75f : 0.0f;
    tbe_status st;
    result a = run_ref(&p, &c, &st), m = run_model(&p, &c);
    char what[160];
    snprintf(what, sizeof what, "problem %llu (%s, wd %s od %s, T %d, threshold %lld chunk %lld)",
             (unsigned long long)k, ref_opt_name(c.opt.kind), tbe_dtype_name(sh.wd),
             tbe_dtype_name(sh.od), sh.T, (long long)c.threshold, (long long)c.chunk);
    CHECK(st.code == TBE_OK, "%s: %s", what, st.message);
    compared += same(&p, &a, &m, what);
    result_free(&a);
    result_free(&m);
    problem_free(&p);
  }
  CHECK(compared == 96, "%d of 96 problems equal the model", compared);
}

/* D = 1, lr = 1, zero weights: the stored weight is -g, so the chunk order shows directly.
 * Contributions 1, then four times 2^-24: one sequence ties back to 1 each time; chunks of 2
 * give 1, 2^-23, 2^-24 and fold to 1 + 2^-23, then 1 + 2^-22 (a tie to even). In atomic mode
 * the partials add in fp64 and round once: chunks of 1 keep 1 + 4 * 2^-24 = 1 + 2^-22, where
 * the fp32 chain of the same chunks ties back to 1. */
static void test_chunk_order(void)
{
  static const int64_t E[] = {2};
  static const int32_t D[] = {1};
  static const int64_t off[] = {0, 1, 2, 3, 4, 5};
  static const int64_t idx[] = {1, 1, 1, 1, 1};
  tb_spec s = {
      .num_tables = 1,
      .E = E,
      .D = D,
      .T = 1,
      .B = 5,
      .itype = TBE_I64,
      .N = 5,
      .indices = idx,
      .offsets = off,
  };
  tbe_batch b = tb_build(&s);
  tbe_layout l;
  tbe_layout_init(&l, &b);
  const float grad[5] = {1.0f, 0x1p-24f, 0x1p-24f, 0x1p-24f, 0x1p-24f};
  const struct {
    int64_t threshold, chunk;
    ref_combine combine;
    float want;
  } t[] = {{6, 2, REF_COMBINE_DETERMINISTIC, -1.0f},
           {5, 2, REF_COMBINE_DETERMINISTIC, -(1.0f + 0x1p-22f)},
           {1, 5, REF_COMBINE_DETERMINISTIC, -1.0f},
           {2, 3, REF_COMBINE_DETERMINISTIC, -(1.0f + 0x1p-23f)},
           {2, 4, REF_COMBINE_DETERMINISTIC, -1.0f},
           {5, 1, REF_COMBINE_DETERMINISTIC, -1.0f},
           {5, 1, REF_COMBINE_ATOMIC, -(1.0f + 0x1p-22f)},
           {2, 2, REF_COMBINE_ATOMIC, -(1.0f + 0x1p-22f)}};
  for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
    ref_bwd_config c = config(REF_OPT_SGD, REF_WD_NONE, t[k].threshold, t[k].chunk);
    c.opt.lr = 1.0f;
    c.combine = t[k].combine;
    float *w = b.weights;
    w[0] = w[1] = 0.0f;
    tbe_status st = ref_backward(&b, &l, &c, grad, NULL, NULL, NULL);
    CHECK(st.code == TBE_OK && w[1] == t[k].want && w[0] == 0.0f,
          "threshold %lld chunk %lld: %a, want %a", (long long)t[k].threshold,
          (long long)t[k].chunk, (double)w[1], (double)t[k].want);
  }
  tbe_layout_free(&l);
  tbe_batch_free(&b);
}

/* Untouched rows keep their bits (a NaN payload included); MEAN counts -1 in L; clipping. */
static void test_hand(void)
{
  static const int64_t E[] = {5};
  static const int32_t D[] = {2};
  static const int64_t off[] = {0, 2, 3, 5};
  static const int64_t idx[] = {1, 3, 1, -1, 4};
  tb_spec s = {
      .num_tables = 1,
      .E = E,
      .D = D,
      .T = 1,
      .B = 3,
      .itype = TBE_I64,
      .N = 5,
      .indices = idx,
      .offsets = off,
  };
  for (int mean = 0; mean < 2; mean++) {
    s.pool = mean ? TBE_POOL_MEAN : TBE_POOL_SUM;
    tbe_batch b = tb_build(&s);
    tbe_layout l;
    tbe_layout_init(&l, &b);
    float *w = b.weights;
    uint32_t nan = 0x7FC01234u;
    for (int i = 0; i < 10; i++)
      w[i] = (float)i;
    memcpy(&w[0], &nan, 4); /* row 0 is never looked up */
    /* grad_output (B=3, D=2), clipped to [-4, 4] */
    const float grad[6] = {1.0f, 2.0f, 3.0f, -5.0f, 6.0f, 0.5f};
    ref_bwd_config c = config(REF_OPT_SGD, REF_WD_NONE, 256, 256);
    c.opt.lr = 1.0f;
    c.clip = 4.0f;
    tbe_status st = ref_backward(&b, &l, &c, grad, NULL, NULL, NULL);
    CHECK(st.code == TBE_OK, "%s", st.message);
    float h = mean ? 0.5f : 1.0f; /* bags 0 and 2 have L = 2 (bag 2 counts its -1) */
    float want[10] = {0, 1, 2 - (1 * h + 3), 3 - (2 * h - 4), 4, 5, 6 - 1 * h, 7 - 2 * h,
                      8 - 4 * h, 9 - 0.5f * h};
    CHECK(memcmp(&w[0], &nan, 4) == 0, "untouched row 0 lost its NaN payload");
    for (int i = 1; i < 10; i++)
      CHECK(w[i] == want[i], "%s w[%d] = %g, want %g", mean ? "mean" : "sum", i, (double)w[i],
            (double)want[i]);
    tbe_layout_free(&l);
    tbe_batch_free(&b);
  }
}

static void test_threads(void)
{
  shape sh = {1, 1, 1, 0, 1, TBE_POOL_SUM, TBE_FP16, TBE_FP32, 4, 300, 30, 500, 70};
  problem p = make_problem(77, &sh);
  ref_bwd_config c = config(REF_OPT_ROWWISE_ADAGRAD, REF_WD_L2, 16, 8);
  c.opt.sr = 1;
  tbe_status st;
  omp_set_num_threads(1);
  result one = run_ref(&p, &c, &st);
  CHECK(st.code == TBE_OK, "%s", st.message);
  const int threads[] = {2, 3, 5};
  for (int k = 0; k < 3; k++) {
    omp_set_num_threads(threads[k]);
    result r = run_ref(&p, &c, &st);
    char what[64];
    snprintf(what, sizeof what, "%d threads vs 1", threads[k]);
    same(&p, &one, &r, what);
    result_free(&r);
  }
  omp_set_num_threads(2);
  result_free(&one);
  problem_free(&p);
}

/* ---------------------------------------------------------------- the exact twin */

/* w_exact/w_bound and m_exact/m_bound of a problem */
typedef struct {
  double *we, *wb, *me, *mb;
} exact;

static exact run_exact(problem *p, const ref_bwd_config *cfg)
{
  int64_t n = p->b.table_offset[p->b.num_tables];
  exact e = {malloc(sizeof(double) * (size_t)(n + 1)), malloc(sizeof(double) * (size_t)(n + 1)),
             malloc(sizeof(double) * (size_t)(p->rows + 1)),
             malloc(sizeof(double) * (size_t)(p->rows + 1))};
  tbe_status st = ref_backward_exact(&p->b, &p->l, cfg, p->grad, p->momentum, e.we, e.wb, e.me,
                                     e.mb);
  CHECK(st.code == TBE_OK, "exact: %s", st.message);
  return e;
}

static void exact_free(exact *e)
{
  free(e->we);
  free(e->wb);
  free(e->me);
  free(e->mb);
}

/* One simulated atomic combine: every run's chunk partials added in fp64 from +0 in a random
 * order and rounded once to fp32, then the update, into r (weights start as the batch's).
 * drop >= 0 plants a bug: every long run leaves its chunk `drop` out. */
static result run_shuffled(problem *p, const ref_bwd_config *cfg, uint64_t *x, int64_t drop)
{
  size_t elem = tbe_dtype_size(p->b.wdtype);
  result r = {malloc(elem * (size_t)p->b.table_offset[p->b.num_tables] + 1),
              malloc(sizeof(float) * (size_t)(p->rows + 1)), NULL};
  memcpy(r.weights, p->b.weights, elem * (size_t)p->b.table_offset[p->b.num_tables]);
  memcpy(r.momentum, p->momentum, sizeof(float) * (size_t)p->rows);
  ref_bwd_work w;
  tbe_status st = ref_bwd_work_init(&w, &p->b, &p->l, cfg, p->grad, NULL);
  CHECK(st.code == TBE_OK, "work: %s", st.message);
  float g[TBE_MAX_D], part[TBE_MAX_D], row[TBE_MAX_D];
  double sum[TBE_MAX_D];
  int64_t *order = malloc(sizeof(int64_t) * (size_t)(w.tr.n + 1));
  for (int64_t run = 0; run < w.tr.num_runs; run++) {
    int64_t rr;
    int32_t j = ref_transpose_table(&w.tr, &p->b, &p->l, run, &rr), D = p->b.D[j];
    int64_t k = ref_bwd_chunks(&w, run), s = w.tr.run_start[run], e = w.tr.run_start[run + 1];
    if (k < 2) {
      ref_bwd_row_grad(&w, run, D, g, part);
    } else {
      for (int64_t i = 0; i < k; i++)
        order[i] = i;
      for (int64_t i = k - 1; i > 0; i--) {
        int64_t m = (int64_t)(rng(x) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[m];
        order[m] = t;
      }
      for (int32_t d = 0; d < D; d++)
        sum[d] = 0.0;
      for (int64_t i = 0; i < k; i++) {
        if (order[i] == drop)
          continue;
        int64_t c0 = s + order[i] * cfg->chunk, c1 = c0 + cfg->chunk < e ? c0 + cfg->chunk : e;
        ref_bwd_sum_entries(&w, c0, c1, D, part);
        for (int32_t d = 0; d < D; d++)
          sum[d] += part[d];
      }
      for (int32_t d = 0; d < D; d++)
        g[d] = (float)sum[d];
    }
    char *dst = (char *)r.weights + (size_t)ref_bwd_weight_at(&p->b, j, rr) * elem;
    uint64_t key = w.tr.key[s];
    ref_load_row(dst, p->b.wdtype, D, row);
    ref_opt_update_row(&cfg->opt, D, g, row, r.momentum + key);
    ref_store_row(&cfg->opt, p->b.wdtype, row, D, key, dst);
  }
  free(order);
  ref_bwd_work_free(&w);
  return r;
}

/* Worst |got - exact| / bound over weights and (Adagrad) momentum; counts violations. */
static double worst_ratio(const problem *p, const ref_bwd_config *c, const exact *e,
                          const result *r, int64_t *bad)
{
  double worst = 0;
  int64_t n = p->b.table_offset[p->b.num_tables];
  int64_t m = c->opt.kind == REF_OPT_ROWWISE_ADAGRAD ? p->rows : 0;
  for (int64_t i = 0; i < n + m; i++) {
    int w = i < n;
    double got = w ? get_value(r->weights, p->b.wdtype, i) : r->momentum[i - n];
    double ex = w ? e->we[i] : e->me[i - n], bd = w ? e->wb[i] : e->mb[i - n];
    double err = fabs(got - ex);
    if (!(err <= bd))
      (*bad)++;
    if (bd > 0 && err / bd > worst)
      worst = err / bd;
  }
  return worst;
}

static void test_exact_bound(void)
{
  double worst = 0;
  int64_t bad = 0, bounded = 0;
  for (uint64_t k = 0; k < 40; k++) {
    uint64_t x = 5000 + k;
    shape sh;
    memset(&sh, 0, sizeof sh);
    sh.vbe = k % 3 == 0;
    sh.pool = k % 4 == 1 ? TBE_POOL_MEAN : TBE_POOL_SUM;
    sh.weighted = sh.pool == TBE_POOL_SUM && k % 2;
    sh.shared = k % 5 < 2;
    sh.pruned = 1;
    sh.wd = (tbe_dtype)(k % 3);
    sh.od = (tbe_dtype)((k / 3) % 3);
    sh.T = 1 + (int32_t)(k % 3);
    sh.B = 40;
    sh.maxL = 12;
    sh.E = 3 + (int64_t)(k % 4);
    sh.D = 1 + (int32_t)((k * 37) % 70);
    problem p = make_problem(x, &sh);
    ref_bwd_config c = config(k % 4 == 0 ? REF_OPT_SGD : REF_OPT_ROWWISE_ADAGRAD,
                              k % 4 == 0 ? REF_WD_NONE : (ref_wd_mode)(k % 3), 8, 1 + k % 5);
    c.combine = REF_COMBINE_ATOMIC;
    c.opt.sr = sh.wd != TBE_FP32 && k % 2;
    exact e = run_exact(&p, &c);
    for (int64_t i = 0; i < p.b.table_offset[p.b.num_tables]; i++)
      bounded += e.wb[i] > 0;
    tbe_status st;
    result ref = run_ref(&p, &c, &st);
    worst = fmax(worst, worst_ratio(&p, &c, &e, &ref, &bad));
    for (int rep = 0; rep < 6; rep++) {
      result r = run_shuffled(&p, &c, &x, -1);
      worst = fmax(worst, worst_ratio(&p, &c, &e, &r, &bad));
      result_free(&r);
    }
    result_free(&ref);
    exact_free(&e);
    problem_free(&p);
  }
  CHECK(bad == 0, "%lld outputs outside exact +- bound", (long long)bad);
  CHECK(bounded > 1000, "only %lld weights had a nonzero bound: no long runs tested",
        (long long)bounded);
  printf("exact twin: worst error/bound %.3g over random combine orders\n", worst);
}

/* A problem from a hand-built spec: grad (bytes) copied, rows rows of zero momentum. */
static problem hand_problem(const tb_spec *s, const float *grad, size_t bytes, int64_t rows)
{
  problem p;
  memset(&p, 0, sizeof p);
  p.b = tb_build(s);
  tbe_layout_init(&p.l, &p.b);
  p.grad = malloc(bytes);
  memcpy(p.grad, grad, bytes);
  p.rows = rows;
  p.momentum = calloc((size_t)rows + 1, sizeof(float));
  return p;
}

/* The bound is approached: one row, 999 chunks of one contribution (1, then 997 times 2^-24,
 * then 0), SGD with lr 1 from w = -2^-24. The fp64 sum S = 1 + 498.5 * 2^-23 is exact and its
 * one rounding ties down to even, 1 + 498 * 2^-23 (half an ulp); w - g = -(1 + 498.5 * 2^-23)
 * ties again, to -(1 + 498 * 2^-23): one ulp from the exact -(1 + 499 * 2^-23), against a
 * bound of the two roundings' half ulps. And the check catches one ulp on a row whose bound
 * is 0. */
static void test_bound_approached(void)
{
  enum { N = 1000 };
  static int64_t idx[N], off[N + 1];
  static float grad[N];
  static const int64_t E[] = {3};
  static const int32_t D[] = {1};
  for (int i = 0; i < N; i++) {
    idx[i] = i < N - 1 ? 1 : 2;
    off[i + 1] = i + 1;
    grad[i] = i == 0 ? 1.0f : i == N - 2 ? 0.0f : 0x1p-24f;
  }
  tb_spec s = {
      .num_tables = 1,
      .E = E,
      .D = D,
      .T = 1,
      .B = N,
      .itype = TBE_I64,
      .N = N,
      .indices = idx,
      .offsets = off,
  };
  problem p = hand_problem(&s, grad, sizeof grad, 3);
  ref_bwd_config c = config(REF_OPT_SGD, REF_WD_NONE, 1, 1);
  c.opt.lr = 1.0f;
  c.combine = REF_COMBINE_ATOMIC;
  ((float *)p.b.weights)[1] = -0x1p-24f;
  exact e = run_exact(&p, &c);
  tbe_status st;
  result r = run_ref(&p, &c, &st);
  float *w = r.weights;
  double ratio = fabs((double)w[1] - e.we[1]) / e.wb[1];
  CHECK(w[1] == -(1.0f + 498 * 0x1p-23f) && ratio <= 1.0 && ratio > 0.99,
        "w %a, error/bound %.6f", (double)w[1], ratio);
  CHECK(e.wb[2] == 0 && e.wb[0] == 0 && (double)w[2] == e.we[2], "row 2 (one chunk) is exact");
  w[2] = nextafterf(w[2], 1.0f);
  int64_t bad = 0;
  worst_ratio(&p, &c, &e, &r, &bad);
  CHECK(bad == 1, "one ulp on an exact row: %lld violations, want 1", (long long)bad);
  result_free(&r);
  exact_free(&e);
  problem_free(&p);
}

/* One partial among 11,719 left out of an atomic combine is caught (ref/SEMANTICS.md 4: the
 * fp64 combine; the free-order fp32 bound gamma32(k-1) * sum|p| was about 8 partials wide at
 * this k, and this test failed with it). One row of D = 8, hit once per bag in 11,719 bags, one
 * entry per chunk, gradients of random sign in [2^-2, 2^3): row-wise Adagrad on fp32 weights,
 * each simulated combine in a random order; without the drop every output is in bound. */
static void test_dropped_partial(void)
{
  enum { K = 11719, DD = 8 };
  static int64_t idx[K], off[K + 1];
  static float grad[K * DD];
  static const int64_t E[] = {3};
  static const int32_t D[] = {DD};
  uint64_t x = 77;
  for (int i = 0; i < K; i++) {
    idx[i] = 1;
    off[i + 1] = i + 1;
    for (int d = 0; d < DD; d++)
      grad[i * DD + d] = spread(&x, 2);
  }
  tb_spec s = {.num_tables = 1, .E = E, .D = D, .T = 1, .B = K, .itype = TBE_I64, .N = K,
               .indices = idx, .offsets = off};
  problem p = hand_problem(&s, grad, sizeof grad, 3);
  for (int i = 0; i < 3; i++)
    p.momentum[i] = 0.5f;
  ref_bwd_config c = config(REF_OPT_ROWWISE_ADAGRAD, REF_WD_NONE, 2, 1);
  c.combine = REF_COMBINE_ATOMIC;
  exact e = run_exact(&p, &c);
  static const int64_t drops[] = {-1, 0, K / 2, K - 1};
  for (size_t k = 0; k < sizeof drops / sizeof drops[0]; k++) {
    int64_t bad = 0;
    result r = run_shuffled(&p, &c, &x, drops[k]);
    double worst = worst_ratio(&p, &c, &e, &r, &bad);
    if (drops[k] < 0)
      CHECK(bad == 0, "no drop: %lld outputs out of bound (worst %.3g)", (long long)bad, worst);
    else
      CHECK(bad > 0, "partial %lld of %d dropped: no output out of bound (worst %.3g)",
            (long long)drops[k], K, worst);
    printf("atomic combine, %d partials, partial %lld dropped: %lld of %d outputs out of bound, "
           "worst error/bound %.3g\n", K, (long long)drops[k], (long long)bad, 3 * DD + 3, worst);
    result_free(&r);
  }
  exact_free(&e);
  problem_free(&p);
}

/* The underflow allowance of Adagrad's sum of squares is reached: at D = 2048, gd_d = the fp32
 * value just below 2^-75 has a square just below 2^-150, which every lane's fma rounds to +0,
 * so each of the 2048 fmas loses almost 2^-150 and the sum is 0 against an exact 2^-139: the
 * error/bound ratio is near 1 (h * 2^-149 = 69 * 2^-149 was 15 times too small). With gd_d =
 * 2^-76 each fma loses 2^-152, a quarter of the allowance, and the ratio is near 1/4. */
static void test_sum_squares_underflow(void)
{
  enum { D = 2048 };
  static float gd[D];
  for (int k = 0; k < 2; k++) {
    for (int d = 0; d < D; d++)
      gd[d] = k == 0 ? nextafterf(0x1p-75f, 0.0f) : 0x1p-76f;
    double sum, bound = ref_bwd_sum_squares_bound(gd, D, &sum);
    float s = ref_lane_dot(gd, gd, D);
    double ratio = fabs((double)s - sum) / bound, want = k == 0 ? 1.0 : 0.25;
    CHECK(s == 0.0f, "k %d: the squares were meant to underflow: sum %a", k, (double)s);
    CHECK(ratio <= want && ratio > 0.99 * want, "k %d: sum %a, exact %a, error/bound %.6f", k,
          (double)s, sum, ratio);
  }
}

static void test_errors(void)
{
  shape sh = {0, 0, 0, 0, 0, TBE_POOL_SUM, TBE_FP32, TBE_FP32, 1, 4, 3, 5, 4};
  problem p = make_problem(3, &sh);
  ref_bwd_config c = config(REF_OPT_ROWWISE_ADAGRAD, REF_WD_NONE, 256, 256);
  tbe_status st = ref_backward(&p.b, &p.l, &c, p.grad, NULL, NULL, NULL);
  CHECK(st.code == TBE_EINVAL && !strcmp(st.field, "momentum"), "adagrad without momentum");
  c.chunk = 0;
  st = ref_backward(&p.b, &p.l, &c, p.grad, p.momentum, NULL, NULL);
  CHECK(st.code == TBE_EINVAL && !strcmp(st.field, "bwd.chunk"), "chunk 0: %s", st.field);
  c.chunk = 4;
  if (p.b.N > 0) {
    tbe_iset(p.b.indices, p.b.itype, 0, 5);
    st = ref_backward(&p.b, &p.l, &c, p.grad, p.momentum, NULL, NULL);
    CHECK(st.code == TBE_EINVAL && !strcmp(st.field, "indices"), "index past E: %s", st.message);
  }
  problem_free(&p);
}

/* The Triton model declines the weights and momentum of a row looked up with different
 * per-sample weights (an unstable sort pairs them), never psw_grad, and not where each row's
 * weights are one value: then its weighted buffers run. */
static void test_triton_declines(void)
{
  shape sh = {0, 1, 0, 0, 0, TBE_POOL_SUM, TBE_FP32, TBE_FP32, 2, 16, 8, 5, 32};
  problem p = make_problem(11, &sh);
  ref_bwd_config c = config(REF_OPT_SGD, REF_WD_NONE, 256, 256);
  char why[256] = "";
  float *w = p.b.per_sample_weights;
  CHECK(p.b.N > 4 * (p.b.E[0] + p.b.E[1]), "%lld lookups: rows repeat", (long long)p.b.N);
  CHECK(ref_backward_triton_declines(&p.b, &p.l, &c, "weights", why, sizeof why) &&
            strstr(why, "unstable sort") &&
            ref_backward_triton_declines(&p.b, &p.l, &c, "momentum", why, sizeof why) &&
            !ref_backward_triton_declines(&p.b, &p.l, &c, "psw_grad", why, sizeof why),
        "drawn weights: the weights and momentum are declined, psw_grad is not");
  for (int64_t q = 0; q < p.b.N; q++) /* one weight per row, rows differ */
    w[q] = 0.5f * (float)(1 + tbe_iget(p.b.indices, p.b.itype, q));
  CHECK(!ref_backward_triton_declines(&p.b, &p.l, &c, "weights", why, sizeof why) &&
            !ref_backward_triton_declines(&p.b, &p.l, &c, "momentum", why, sizeof why),
        "one weight per row: declined (%s)", why);
  tbe_status st = ref_backward_triton(&p.b, &p.l, &c, p.grad, p.momentum, NULL, NULL, NULL);
  CHECK(st.code == TBE_OK, "the model on one weight per row: %s", st.message);
  problem_free(&p);
}

/* The Triton model's weighted buffers round the product the H200's PTX rounds, column by column
 * at BLOCK 32, 64 and 128: one table of 2 rows, row 1 looked up by 16 bags (a short run) and row
 * 0 by 256 (a long run, one chunk), each run's first two lookups with gradients 1 + 2^-12 and -1
 * in every column, the rest 0, all weighted 1 + 2^-12. Rounding the first product, (0, 1),
 * leaves 2^-12; rounding the second, (1, 0), 2^-12 + 2^-24 (the rest is exact), and SGD at lr 1
 * on zero weights stores -g. The rule: by 32-column slot ((0, 1) in the even ones) from BLOCK 64
 * up in short runs and from 128 up in long runs' chunks, else (1, 0). */
static void test_triton_pairing(void)
{
  enum { SHORT = 16, LONG = 256, N = SHORT + LONG };
  const float w = 1.0f + 0x1p-12f;
  static int64_t idx[N], off[N + 1];
  static float psw[N], grad[N * 128];
  for (int64_t q = 0; q < N; q++) {
    idx[q] = q < SHORT;
    off[q + 1] = q + 1;
    psw[q] = w;
  }
  for (int32_t D = 32; D <= 128; D *= 2) {
    const int64_t E = 2;
    tb_spec s = {.num_tables = 1, .E = &E, .D = &D, .wdtype = TBE_FP32, .T = 1, .B = N,
                 .itype = TBE_I64, .N = N, .indices = idx, .offsets = off, .psw = psw,
                 .pool = TBE_POOL_SUM, .out_dtype = TBE_FP32};
    tbe_batch b = tb_build(&s);
    tbe_layout l;
    tbe_layout_init(&l, &b);
    for (int64_t q = 0; q < N; q++) {
      const int64_t k = q < SHORT ? q : q - SHORT; /* bag q's place in its row's run */
      for (int32_t d = 0; d < D; d++)
        grad[q * D + d] = k == 0 ? w : k == 1 ? -1.0f : 0.0f;
    }
    ref_bwd_config c = config(REF_OPT_SGD, REF_WD_NONE, 256, 256);
    c.opt.lr = 1.0f;
    float momentum[2] = {0};
    tbe_status st = ref_backward_triton(&b, &l, &c, grad, momentum, NULL, NULL, NULL);
    CHECK(st.code == TBE_OK, "D %d: %s", D, st.message);
    for (int64_t row = 0; row < E && st.code == TBE_OK; row++)
      for (int32_t d = 0; d < D; d++) {
        const int slots = D >= (row == 0 ? 128 : 64), first = slots && (d / 32) % 2 == 0;
        const float want = -(first ? 0x1p-12f : 0x1p-12f + 0x1p-24f),
                    got = ((const float *)b.weights)[row * D + d];
        CHECK(got == want, "BLOCK %d, %s run, column %d: %a, want %a (%s product rounded)", D,
              row == 0 ? "long" : "short", d, (double)got, (double)want,
              first ? "first" : "second");
      }
    tbe_layout_free(&l);
    tbe_batch_free(&b);
  }
}

/* The free-order twin (ref_backward_exact_free, ref_psw_grad_exact_free): the normative order
 * and FBGEMM's (backward_order.h) are two of the orders it allows, so both lie within it on
 * random problems; FBGEMM's fast path, which drops the weight decay, does not. */
static void test_free_bound(void)
{
  int64_t bad = 0, dropped = 0, compared = 0;
  for (uint64_t k = 0; k < 30; k++) {
    uint64_t x = 7000 + k;
    shape sh;
    memset(&sh, 0, sizeof sh);
    sh.pool = k % 4 == 1 ? TBE_POOL_MEAN : TBE_POOL_SUM;
    sh.weighted = sh.pool == TBE_POOL_SUM && k % 2;
    sh.wd = k % 3 == 2 ? TBE_FP16 : TBE_FP32; /* FBGEMM's CPU has no bf16 */
    sh.od = k % 5 == 3 ? TBE_FP16 : TBE_FP32;
    sh.T = 1 + (int32_t)(k % 3);
    sh.B = 30;
    sh.maxL = 12;
    sh.E = 3 + (int64_t)(k % 4);
    sh.D = 4 * (1 + (int32_t)((k * 7) % 17));
    problem p = make_problem(x, &sh);
    /* fp16 SGD rounds FBGEMM's step to fp16 (outside any fp32 order): Adagrad there */
    int sgd = k % 4 == 0 && sh.wd == TBE_FP32;
    ref_wd_mode wd = sgd ? REF_WD_NONE : (ref_wd_mode)(k % 3);
    ref_bwd_config c = config(sgd ? REF_OPT_SGD : REF_OPT_ROWWISE_ADAGRAD, wd, 8, 1 + k % 5);
    exact e = run_exact(&p, &c);
    tbe_status st = ref_backward_exact_free(&p.b, &p.l, &c, p.grad, p.momentum, e.we, e.wb,
                                            e.me, e.mb);
    CHECK(st.code == TBE_OK, "free twin: %s", st.message);
    result ref = run_ref(&p, &c, &st);
    worst_ratio(&p, &c, &e, &ref, &bad); /* the normative order: inside */
    result fb = run_ref(&p, &c, &st); /* its buffers, refilled by the FBGEMM model */
    size_t wbytes = tbe_dtype_size(p.b.wdtype) * (size_t)p.b.table_offset[p.b.num_tables];
    memcpy(fb.weights, p.b.weights, wbytes);
    memcpy(fb.momentum, p.momentum, sizeof(float) * (size_t)p.rows);
    tbe_batch copy = p.b;
    copy.weights = fb.weights;
    st = ref_backward_order(REF_ORDER_FBGEMM_CPU, &copy, &p.l, &c, p.grad, fb.momentum,
                            p.b.per_sample_weights ? fb.psw : NULL);
    CHECK(st.code == TBE_OK, "fbgemm model: %s", st.message);
    /* the fast path (fp32 weights and output, one feature a table here) drops the decay */
    int fast = !sgd && wd != REF_WD_NONE && sh.wd == TBE_FP32 && sh.od == TBE_FP32;
    int64_t outside = 0;
    worst_ratio(&p, &c, &e, &fb, &outside);
    if (fast)
      dropped += outside > 0;
    else
      bad += outside;
    if (p.b.per_sample_weights) {
      double *px = malloc(sizeof(double) * (size_t)(p.b.N + 1));
      double *pb = malloc(sizeof(double) * (size_t)(p.b.N + 1));
      ref_psw_grad_exact_free(&p.b, &p.l, &c, p.grad, px, pb);
      for (int64_t i = 0; i < p.b.N; i++) {
        bad += !(fabs(ref.psw[i] - px[i]) <= pb[i]) + !(fabs(fb.psw[i] - px[i]) <= pb[i]);
        compared += 2;
      }
      free(px);
      free(pb);
    }
    compared += p.b.table_offset[p.b.num_tables];
    result_free(&fb);
    result_free(&ref);
    exact_free(&e);
    problem_free(&p);
  }
  CHECK(bad == 0, "%lld outputs of the normative or FBGEMM's order outside the free-order bound",
        (long long)bad);
  CHECK(dropped > 0, "FBGEMM's dropped weight decay stayed inside the free-order bound");
  printf("free-order twin: %lld outputs inside; %lld dropped-decay problems outside\n",
         (long long)compared, (long long)dropped);
}

int main(void)
{
  omp_set_num_threads(2);
  test_hand();
  test_chunk_order();
  test_against_model();
  test_threads();
  test_exact_bound();
  test_free_bound();
  test_bound_approached();
  test_dropped_partial();
  test_sum_squares_underflow();
  test_errors();
  test_triton_declines();
  test_triton_pairing();
  return TEST_MAIN_RESULT();
}
