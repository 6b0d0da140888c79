/* backward_order_triton.c: torchrec's Triton TBE backward and optimizer as a model
 * (backward_order.h): its order's bits where knowable, the slack of what is not. Not our order.
 *
 * Its kernels run one warp per program (num_warps 1), so every sum is a warp's: a thread adds
 * its own elements in register order, then the lanes combine by butterfly shuffles, largest
 * offset first, each lane adding its partner's value to its own. Where the compiler fuses a
 * product into the first addition of a sum, the product it fuses and the one it rounds are its
 * choice, read from the PTX Triton 3.6 emits (and measured, cases/triton_vectors.cases).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_order.h"
#include "half.h"
#include "approx_h200.h"
#include "optimizer.h"

#define TRI_THRESHOLD 256 /* runs of this many entries or more are long: chunks of 256 */
#define TRI_LANES 32

/* One lookup: its linear key (the table's first row among all tables, plus the index: a -1 lands
 * on the previous table's last row), position and bag. */
typedef struct {
  int64_t key, p, bag;
} tri_entry;

static int by_key(const void *x, const void *y)
{
  const tri_entry *a = x, *b = y;
  return a->key != b->key ? (a->key > b->key) - (a->key < b->key)
                          : (a->p > b->p) - (a->p < b->p);
}

/* ---- the warp's sums ---- */

/* Column d of a buffer of S rows (x[k][d], weighted by w[k] when w is given): laid out
 * [S, BLOCK] with 32 / BLOCK lanes along the rows below BLOCK 32, a lane holds rows k, k + tr,
 * ...; in a lane the weighted products pair (1, 0): its second product is rounded and its first
 * fused onto it (where slots is set, (0, 1) in the even 32-column slots: tri_slots), the rest
 * fused in order. */
static float tri_buffer_sum(const float *const *x, const float *w, int S, int32_t block,
                            int slots, int32_t d)
{
  const int tr = block >= TRI_LANES ? 1 : TRI_LANES / block;
  float v[TRI_LANES];
  for (int k = 0; k < tr; k++) {
    if (!w) {
      v[k] = x[k][d];
      for (int r = k + tr; r < S; r += tr)
        v[k] = v[k] + x[r][d];
      continue;
    }
    if (!slots || (d / 32) % 2)
      v[k] = fmaf(x[k][d], w[k], x[k + tr][d] * w[k + tr]);
    else
      v[k] = fmaf(x[k + tr][d], w[k + tr], x[k][d] * w[k]);
    for (int r = k + 2 * tr; r < S; r += tr)
      v[k] = fmaf(x[r][d], w[r], v[k]);
  }
  for (int n = tr / 2; n > 0; n /= 2) {
    float u[TRI_LANES];
    for (int k = 0; k < tr; k++)
      u[k] = v[k] + v[k ^ n];
    memcpy(v, u, sizeof(float) * (size_t)tr);
  }
  return v[0];
}

/* The 1-D sum over BLOCK columns of a_d * b_d (zero past D), in every lane (out[32]): lane l
 * holds columns l, l + 32, ...; with two or more, their products pair (1, 0) as above and the
 * shuffles add sums, so every lane ends with one value; with one column a lane (BLOCK <= 32,
 * BLOCK lanes distinct) the first shuffle fuses the lane's own product onto its partner's
 * rounded one, so the lanes' values may differ. */
static void tri_lane_dot(const float *a, const float *b, int32_t D, int32_t block, float *out)
{
  const int lanes = block >= TRI_LANES ? TRI_LANES : block, R = block / lanes;
#define AT(v, i) ((i) < D ? (v)[i] : 0.0f)
  float v[TRI_LANES];
  for (int l = 0; l < lanes; l++) {
    v[l] = AT(a, l) * AT(b, l);
    if (R >= 2) {
      v[l] = fmaf(AT(a, l), AT(b, l), AT(a, l + lanes) * AT(b, l + lanes));
      for (int r = 2; r < R; r++)
        v[l] = fmaf(AT(a, l + r * lanes), AT(b, l + r * lanes), v[l]);
    }
  }
  for (int n = lanes / 2, first = R == 1; n > 0; n /= 2, first = 0) {
    float u[TRI_LANES];
    for (int l = 0; l < lanes; l++)
      u[l] = first ? fmaf(AT(a, l), AT(b, l), v[l ^ n]) : v[l] + v[l ^ n];
    memcpy(v, u, sizeof(float) * (size_t)lanes);
  }
#undef AT
  for (int l = 0; l < TRI_LANES; l++)
    out[l] = v[l % lanes];
}

/* ---- the slack of what the model cannot know ---- */

static double ulp32(double x)
{
  int e;
  frexp(fabs(x), &e);
  return ldexp(1.0, (e - 24 > -149 ? e - 24 : -149));
}

static double ulp_of(tbe_dtype t, double x)
{
  int e;
  frexp(fabs(x), &e);
  if (t == TBE_FP16)
    return ldexp(1.0, e - 11 > -24 ? e - 11 : -24);
  if (t == TBE_BF16)
    return ldexp(1.0, e - 8 > -133 ? e - 8 : -133);
  return ulp32(x);
}

static double gamma32(int64_t n) { return (double)n * 0x1p-24 / (1.0 - (double)n * 0x1p-24); }

/* The most two stores of values within delta of x differ by: the fp32 rounding and, for 16-bit
 * weights, the second. */
static double store_slack(tbe_dtype t, double x, double delta)
{
  double s = delta + ulp32(fabs(x) + delta);
  return t == TBE_FP32 ? s : s + ulp_of(t, fabs(x) + s);
}

/* Row-wise Adagrad's slack for one lane: from the model's IEEE sum of squares s (within ds of
 * the GPU's), momentum m, D, lr and eps to the momentum's (*dm) and the rate's (*dalr), with
 * div.full and sqrt.approx.ftz within REF_H200_DIV_FULL_ULP and REF_H200_SQRT_APPROX_ULP ulps
 * of the exact values (ref/approx_h200.h, measured). */
static void tri_adagrad_slack(double s, double ds, float m, int32_t D, float lr, float eps,
                              double *dm, double *dalr)
{
  const double avg = (double)(float)(s / D);
  const double da = REF_H200_DIV_FULL_ULP * ulp32(fabs(avg) + ds / D) + 0.5 * ulp32(avg) + ds / D;
  const double m0 = (double)(float)((double)m + avg);
  *dm = da + ulp32(fabs(m0) + da);
  const double q0 = sqrt(m0);
  double droot = sqrt(*dm);
  if (m0 > *dm)
    droot = fmin(droot, *dm / (sqrt(m0) + sqrt(m0 - *dm)));
  const double ftz = 0x1p-63; /* a subnormal momentum's root is flushed to 0 */
  const double dq = REF_H200_SQRT_APPROX_ULP * ulp32(q0 + droot) + 0.5 * ulp32(q0) + droot + ftz;
  const double den = (double)(float)(q0 + eps);
  const double dd = dq + ulp32(den + dq);
  if (!(den > dd)) {
    *dalr = INFINITY;
    return;
  }
  const double alr = lr / den;
  *dalr = REF_H200_DIV_FULL_ULP * ulp32(alr * (1 + dd / (den - dd))) + 0.5 * ulp32(alr) +
          fabs(lr) * dd / (den * (den - dd));
}

/* ---- one run ---- */

typedef struct {
  const tbe_batch *b;
  const tbe_layout *l;
  const ref_bwd_config *cfg;
  const float *G;    /* grad_output widened to fp32 */
  const int64_t *first_row; /* [num_tables + 1] each table's first row among all tables */
  int32_t block;
} tri_ctx;

/* Whether a weighted buffer's rounded product follows the 32-column slot (tri_buffer_sum), as
 * the PTX Triton 3.6 emits for the H200 pairs it: the short-run kernel from BLOCK 64 up (read for
 * fp32 and bf16 weights; its buffer never touches the weights), the long-run kernel's chunks
 * from BLOCK 128 up (at 64 both slots pair (1, 0)); below, (1, 0) everywhere. */
static int tri_slots(int32_t block, int long_run) { return block >= (long_run ? 128 : 64); }

/* The gradient of entries e[0..n) (a short run, or one chunk of a long run) into g[0..D):
 * buffers of 8 rows (16 weighted) summed by tri_buffer_sum and added to g, then the rest one at
 * a time. */
static void tri_chunk_grad(const tri_ctx *c, const tri_entry *e, int64_t n, int32_t D,
                           int long_run, float *g)
{
  const float *psw = c->b->per_sample_weights;
  const int S = psw ? 16 : 8, slots = tri_slots(c->block, long_run);
  for (int32_t d = 0; d < D; d++)
    g[d] = 0.0f;
  int64_t i = 0;
  for (; i + S <= n; i += S) {
    const float *x[16];
    float w[16];
    for (int k = 0; k < S; k++) {
      x[k] = c->G + c->l->bag_out[e[i + k].bag];
      w[k] = psw ? psw[e[i + k].p] : 1.0f;
    }
    for (int32_t d = 0; d < D; d++)
      g[d] = g[d] + tri_buffer_sum(x, psw ? w : NULL, S, c->block, slots, d);
  }
  for (; i < n; i++) {
    const float *x = c->G + c->l->bag_out[e[i].bag];
    for (int32_t d = 0; d < D; d++)
      g[d] = psw ? fmaf(x[d], psw[e[i].p], g[d]) : g[d] + x[d];
  }
}

/* One run e[0..n): its gradient (chunks of 256 added in order onto +0 when long; the GPU adds
 * them by atomics in any order, so from three chunks on each column carries slack), then the
 * update of its row, with the slack of each element where w_slack / m_slack are given. */
static void tri_run(const tri_ctx *c, const tri_entry *e, int64_t n, float *momentum,
                    double *w_slack, double *m_slack)
{
  const tbe_batch *b = c->b;
  const int32_t t = c->l->bag_feature[e[0].bag], j = b->feature_table_map[t], D = b->D[j];
  const int64_t row = e[0].key - c->first_row[j];
  float g[TBE_MAX_D], w[TBE_MAX_D], part[TBE_MAX_D];
  double eg[TBE_MAX_D];
  for (int32_t d = 0; d < D; d++)
    eg[d] = 0.0;
  if (n < TRI_THRESHOLD)
    tri_chunk_grad(c, e, n, D, 0, g);
  else {
    int64_t chunks = (n + TRI_THRESHOLD - 1) / TRI_THRESHOLD;
    for (int32_t d = 0; d < D; d++)
      g[d] = 0.0f;
    for (int64_t k = 0; k < chunks; k++) {
      int64_t s = k * TRI_THRESHOLD, len = n - s < TRI_THRESHOLD ? n - s : TRI_THRESHOLD;
      tri_chunk_grad(c, e + s, len, D, 1, part);
      for (int32_t d = 0; d < D; d++) {
        g[d] = g[d] + part[d];
        eg[d] += fabs(part[d]);
      }
    }
    for (int32_t d = 0; d < D; d++) /* both orders within gamma(k - 1) of the exact sum */
      eg[d] = chunks >= 3 ? 2 * gamma32(chunks - 1) * eg[d] : 0.0;
  }
  const int64_t flat = b->table_offset[j] + row * D;
  const size_t elem = tbe_dtype_size(b->wdtype);
  char *at = (char *)b->weights + (size_t)flat * elem;
  ref_load_row(at, b->wdtype, D, w);
  const ref_opt_config *o = &c->cfg->opt;
  float rate[TRI_LANES], m_new = 0.0f;
  double dalr[TRI_LANES] = {0}, dm = 0.0;
  for (int l = 0; l < TRI_LANES; l++)
    rate[l] = o->lr;
  if (o->kind == REF_OPT_ROWWISE_ADAGRAD) {
    const int64_t mi = c->first_row[j] + row;
    float s[TRI_LANES];
    tri_lane_dot(g, g, D, c->block, s);
    double ds = 0.0, sq = 0.0;
    for (int32_t d = 0; d < D; d++) {
      ds += 2 * fabs(g[d]) * eg[d] + eg[d] * eg[d];
      sq += (fabs(g[d]) + eg[d]) * (fabs(g[d]) + eg[d]);
    }
    ds = ds > 0 ? ds + 2 * gamma32(c->block / TRI_LANES + 6) * sq : 0.0;
    for (int l = 0; l < TRI_LANES; l++) {
      float ml = momentum[mi] + s[l] / (float)D;
      rate[l] = o->lr / (sqrtf(ml) + o->eps);
      double dml = 0.0;
      if (w_slack)
        tri_adagrad_slack(s[l], ds, momentum[mi], D, o->lr, o->eps, &dml, &dalr[l]);
      if (l == 0) {
        m_new = ml;
        dm = dml;
      }
    }
    momentum[mi] = m_new; /* lane 0 stores it */
    if (m_slack)
      m_slack[mi] = dm;
  }
  for (int32_t d = 0; d < D; d++) {
    const int l = d % TRI_LANES;
    const float v = fmaf(-rate[l], g[d], w[d]);
    if (w_slack) {
      double dx = dalr[l] * (fabs(g[d]) + eg[d]) + fabs(rate[l]) * eg[d];
      w_slack[flat + d] = dx > 0 ? store_slack(b->wdtype, v, dx) : 0.0;
    }
    if (b->wdtype == TBE_FP32)
      ((float *)at)[d] = v;
    else if (b->wdtype == TBE_FP16)
      ((uint16_t *)at)[d] = ref_float_to_half(v);
    else
      ((uint16_t *)at)[d] = ref_float_to_bf16(v);
  }
}

/* ---- the whole backward ---- */

/* psw_grad[p]: the 1-D sum of row_d * G_d over BLOCK, lane 0's value, on the weights before
 * the update. */
static void tri_psw_grad(const tri_ctx *c, float *psw_grad)
{
  const tbe_batch *b = c->b;
  float r[TBE_MAX_D], s[TRI_LANES];
  for (int64_t i = 0; i < c->l->total_B; i++) {
    const int32_t j = b->feature_table_map[c->l->bag_feature[i]], D = b->D[j];
    for (int64_t p = tbe_iget(b->offsets, b->itype, i);
         p < tbe_iget(b->offsets, b->itype, i + 1); p++) {
      int64_t at = b->table_offset[j] + tbe_iget(b->indices, b->itype, p) * D;
      ref_load_row((const char *)b->weights + (size_t)at * tbe_dtype_size(b->wdtype),
                   b->wdtype, D, r);
      tri_lane_dot(r, c->G + c->l->bag_out[i], D, c->block, s);
      psw_grad[p] = s[0];
    }
  }
}

/* Each table's first row among all tables, [num_tables + 1] (malloc'd; NULL out of memory). */
static int64_t *tri_first_rows(const tbe_batch *b)
{
  int64_t *f = malloc(sizeof *f * (size_t)(b->num_tables + 1));
  if (f) {
    f[0] = 0;
    for (int32_t j = 0; j < b->num_tables; j++)
      f[j + 1] = f[j] + b->E[j];
  }
  return f;
}

/* The lookups of b as entries, sorted by key (stably: a row's entries in position order). */
static tri_entry *tri_entries(const tbe_batch *b, const tbe_layout *l, const int64_t *first_row)
{
  tri_entry *e = malloc(sizeof *e * (size_t)(b->N + 1));
  if (!e)
    return NULL;
  for (int64_t i = 0; i < l->total_B; i++) {
    const int32_t j = b->feature_table_map[l->bag_feature[i]];
    for (int64_t p = tbe_iget(b->offsets, b->itype, i);
         p < tbe_iget(b->offsets, b->itype, i + 1); p++)
      e[p] = (tri_entry){first_row[j] + tbe_iget(b->indices, b->itype, p), p, i};
  }
  qsort(e, (size_t)b->N, sizeof *e, by_key);
  return e;
}

int ref_backward_triton_declines(const tbe_batch *b, const tbe_layout *l,
                                 const ref_bwd_config *cfg, const char *output, char *why,
                                 size_t n)
{
  if (strcmp(output, "weights") && strcmp(output, "momentum"))
    return 0; /* psw_grad reads neither the sort nor the rounding */
  if (cfg->opt.sr && !strcmp(output, "weights")) {
    snprintf(why, n, "stochastic rounding: the Triton TBE draws its own stream (tl.rand, seeded "
             "from torch's generator) onto the fp16 grid");
    return 1;
  }
  if (!b->per_sample_weights)
    return 0;
  int64_t *first_row = tri_first_rows(b);
  tri_entry *e = first_row ? tri_entries(b, l, first_row) : NULL;
  int paired = 0;
  for (int64_t i = 1; e && i < b->N && !paired; i++)
    paired = e[i].key == e[i - 1].key &&
             b->per_sample_weights[e[i].p] != b->per_sample_weights[e[i - 1].p];
  free(e);
  free(first_row);
  if (paired)
    snprintf(why, n, "a row looked up with different per-sample weights: the Triton TBE pairs "
             "each weight with an entry of its row through an unstable sort (torch.argsort), "
             "whose permutation no model can know");
  return paired;
}

tbe_status ref_backward_triton(tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                               const void *grad_output, float *momentum, float *psw_grad,
                               double *w_slack, double *m_slack)
{
  if (b->pool != TBE_POOL_SUM)
    return tbe_error(TBE_EINVAL, "pool", -1, "the Triton TBE pools by SUM only");
  const int32_t block = ref_triton_block(b);
  if (block < 4)
    return tbe_error(TBE_EINVAL, "D", -1, "BLOCK_SIZE %d: its lanes hold rows twice, an order "
                     "not measured", block);
  for (int64_t i = 0; i < l->total_B; i++)
    for (int64_t p = tbe_iget(b->offsets, b->itype, i);
         p < tbe_iget(b->offsets, b->itype, i + 1); p++)
      if (tbe_iget(b->indices, b->itype, p) == -1 &&
          b->table_offset[b->feature_table_map[l->bag_feature[i]]] == 0)
        return tbe_error(TBE_EINVAL, "indices", p, "a pruned row of the first table: the "
                         "Triton TBE reads it from before the weights");
  int64_t *first_row = tri_first_rows(b);
  float *G = malloc(sizeof(float) * (size_t)(l->out_elems + 1));
  tri_entry *e = G && first_row ? tri_entries(b, l, first_row) : NULL;
  if (!e) {
    free(G);
    free(first_row);
    return tbe_error(TBE_ENOMEM, "backward", -1, "cannot sort %lld lookups", (long long)b->N);
  }
  for (int64_t i = 0; i < l->out_elems; i++)
    G[i] = b->out_dtype == TBE_FP32 ? ((const float *)grad_output)[i]
         : b->out_dtype == TBE_FP16 ? ref_half_to_float(((const uint16_t *)grad_output)[i])
                                    : ref_bf16_to_float(((const uint16_t *)grad_output)[i]);
  const int64_t nw = b->table_offset[b->num_tables];
  if (w_slack)
    memset(w_slack, 0, sizeof(double) * (size_t)nw);
  if (m_slack)
    memset(m_slack, 0, sizeof(double) * (size_t)first_row[b->num_tables]);
  tri_ctx c = {b, l, cfg, G, first_row, block};
  if (psw_grad && b->per_sample_weights)
    tri_psw_grad(&c, psw_grad);
  for (int64_t s = 0, end; cfg->opt.kind != REF_OPT_NONE && s < b->N; s = end) {
    for (end = s + 1; end < b->N && e[end].key == e[s].key; end++)
      ;
    tri_run(&c, e + s, end - s, momentum, w_slack, m_slack);
  }
  free(e);
  free(G);
  free(first_row);
  return tbe_ok();
}
