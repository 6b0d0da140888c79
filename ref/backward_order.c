/* backward_order.c: the backward in another implementation's order (backward_order.h: FBGEMM's
 * CPU TBE here, the Triton TBE's in backward_order_triton.c), the model an external engine is held
 * to. Not backward.c's order.
 *
 * A model, not a hot path: one group, row and column at a time, the plainest loops that spell
 * the order (groups depend on each other: a later one sees an earlier one's update).
 */
#include "backward_order.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"

int ref_order_backward_is_normative(ref_order o) { return o == REF_ORDER_NORMATIVE; }

int ref_backward_order_declines(ref_order o, const tbe_batch *b, const tbe_layout *l,
                                const ref_bwd_config *cfg, const char *output, char *why,
                                size_t n)
{
  return o == REF_ORDER_TRITON && ref_backward_triton_declines(b, l, cfg, output, why, n);
}

/* One lookup of a group: its row and where it lies (bag, position); seq keeps their order. */
typedef struct {
  int64_t row, seq, bag, p;
} lookup;

static int by_row(const void *x, const void *y)
{
  const lookup *a = x, *b = y;
  return a->row != b->row ? (a->row > b->row) - (a->row < b->row)
                          : (a->seq > b->seq) - (a->seq < b->seq);
}

/* The first element of bag i's gradient slice (pooled) or position p's (NONE). */
static int64_t g_at(const tbe_batch *b, const tbe_layout *l, int64_t i, int64_t p, int32_t D)
{
  return b->pool == TBE_POOL_NONE ? p * D : l->bag_out[i];
}

/* Row gradient of the lookups k[0..n) of one row (the header's order). */
static void fbgemm_row_grad(const tbe_batch *b, const tbe_layout *l, const float *G,
                            const lookup *k, int64_t n, int32_t D, float *g)
{
  for (int32_t d = 0; d < D; d++)
    g[d] = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    const float *Gr = G + g_at(b, l, k[i].bag, k[i].p, D);
    int64_t L = tbe_iget(b->offsets, b->itype, k[i].bag + 1) -
                tbe_iget(b->offsets, b->itype, k[i].bag);
    int scaled = b->per_sample_weights || (b->pool == TBE_POOL_MEAN && L > 0);
    float c = b->per_sample_weights ? b->per_sample_weights[k[i].p]
                                    : (float)(1.0 / (double)(L > 0 ? L : 1));
    for (int32_t d = 0; d < D; d++)
      g[d] = scaled ? fmaf(c, Gr[d], g[d]) : g[d] + Gr[d];
  }
}

/* The update of one row w[0..D) (fp32, widened) and its momentum *m (the header's rules). */
static void fbgemm_update(const ref_opt_config *o, tbe_dtype t, int fast, int32_t D,
                          const float *g, float *w, float *m)
{
  if (o->kind == REF_OPT_SGD) {
    for (int32_t d = 0; d < D; d++)
      w[d] = t == TBE_FP32 ? fmaf(-o->lr, g[d], w[d])
                           : w[d] - ref_half_to_float(ref_float_to_half(o->lr * g[d]));
    return;
  }
  float s = 0.0f;
  if (fast) {
    float lane[8] = {0};
    for (int32_t d = 0; d < D; d++)
      lane[d % 8] = lane[d % 8] + g[d] * g[d];
    s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    *m = *m + s / (float)D;
    float mu = -o->lr / (sqrtf(*m) + o->eps);
    for (int32_t d = 0; d < D; d++)
      w[d] = w[d] + g[d] * mu;
    return;
  }
  float gd[TBE_MAX_D];
  const int l2 = o->wd == REF_WD_L2;
  for (int32_t d = 0; d < D; d++) {
    gd[d] = l2 ? fmaf(o->lambda, w[d], g[d]) : g[d];
    s = l2 && t == TBE_FP16 ? fmaf(gd[d], gd[d], s) : s + gd[d] * gd[d];
  }
  *m = *m + s / (float)D;
  float mu = o->lr / (sqrtf(*m) + o->eps);
  float c = l2 ? 1.0f - mu * o->lambda : o->wd == REF_WD_DECOUPLE ? 1.0f - o->lr * o->lambda
                                                                   : 1.0f;
  for (int32_t d = 0; d < D; d++)
    w[d] = fmaf(c, w[d], -(g[d] * mu));
}

/* psw_grad[p] for every position of every bag, on the weights before any update. */
static void fbgemm_psw_grad(const tbe_batch *b, const tbe_layout *l, const float *G,
                            float *psw_grad)
{
  memset(psw_grad, 0, sizeof(float) * (size_t)b->N);
  float r[TBE_MAX_D];
  for (int64_t i = 0; i < l->total_B; i++) {
    int32_t j = b->feature_table_map[l->bag_feature[i]], D = b->D[j];
    for (int64_t p = tbe_iget(b->offsets, b->itype, i);
         p < tbe_iget(b->offsets, b->itype, i + 1); p++) {
      int64_t at = b->table_offset[j] + tbe_iget(b->indices, b->itype, p) * D;
      ref_load_row((const char *)b->weights + (size_t)at * tbe_dtype_size(b->wdtype),
                   b->wdtype, D, r);
      float acc = 0.0f;
      for (int32_t d = 0; d < D; d++)
        acc = fmaf(G[l->bag_out[i] + d], r[d], acc);
      psw_grad[p] = acc;
    }
  }
}

/* One group of features [t0, t1) of table j: each of its rows updated once. */
static tbe_status fbgemm_group(tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                               const float *G, int32_t t0, int32_t t1, float *momentum,
                               int64_t rows_before)
{
  const int32_t j = b->feature_table_map[t0], D = b->D[j];
  int64_t n = 0, first = tbe_iget(b->offsets, b->itype, l->B_offsets[t0]);
  int64_t last = tbe_iget(b->offsets, b->itype, l->B_offsets[t1]);
  lookup *k = malloc(sizeof *k * (size_t)(last - first + 1));
  if (!k)
    return tbe_error(TBE_ENOMEM, "backward", -1, "cannot sort %lld lookups",
                     (long long)(last - first));
  for (int64_t i = l->B_offsets[t0]; i < l->B_offsets[t1]; i++)
    for (int64_t p = tbe_iget(b->offsets, b->itype, i);
         p < tbe_iget(b->offsets, b->itype, i + 1); p++, n++)
      k[n] = (lookup){tbe_iget(b->indices, b->itype, p), n, i, p};
  qsort(k, (size_t)n, sizeof *k, by_row);
  const int fast = cfg->opt.kind == REF_OPT_ROWWISE_ADAGRAD && b->wdtype == TBE_FP32 &&
                   b->out_dtype == TBE_FP32 && t1 - t0 == 1 && b->pool != TBE_POOL_NONE;
  const size_t elem = tbe_dtype_size(b->wdtype);
  float g[TBE_MAX_D], w[TBE_MAX_D];
  for (int64_t s = 0, e; s < n; s = e) {
    for (e = s + 1; e < n && k[e].row == k[s].row; e++)
      ;
    fbgemm_row_grad(b, l, G, k + s, e - s, D, g);
    char *at = (char *)b->weights + (size_t)(b->table_offset[j] + k[s].row * D) * elem;
    ref_load_row(at, b->wdtype, D, w);
    float m = momentum ? momentum[rows_before + k[s].row] : 0.0f;
    fbgemm_update(&cfg->opt, b->wdtype, fast, D, g, w, &m);
    for (int32_t d = 0; d < D; d++) /* one rounding to 16-bit weights */
      if (b->wdtype == TBE_FP32)
        ((float *)at)[d] = w[d];
      else
        ((uint16_t *)at)[d] = ref_float_to_half(w[d]);
    if (momentum)
      momentum[rows_before + k[s].row] = m;
  }
  free(k);
  return tbe_ok();
}

/* What FBGEMM's CPU backward has no model of here. */
static tbe_status fbgemm_refuses(const tbe_batch *b, const ref_bwd_config *cfg)
{
  if (b->wdtype == TBE_BF16 || b->out_dtype == TBE_BF16)
    return tbe_error(TBE_EINVAL, "wdtype", -1, "FBGEMM's CPU TBE has no bf16");
  if (cfg->opt.sr && b->wdtype != TBE_FP32)
    return tbe_error(TBE_EINVAL, "sr", -1, "FBGEMM's CPU TBE has no stochastic rounding");
  for (int64_t p = 0; p < b->N; p++)
    if (tbe_iget(b->indices, b->itype, p) == -1)
      return tbe_error(TBE_EINVAL, "indices", p, "FBGEMM's CPU TBE refuses a pruned row");
  return tbe_ok();
}

tbe_status ref_backward_order(ref_order o, tbe_batch *b, const tbe_layout *l,
                              const ref_bwd_config *cfg, const void *grad_output,
                              float *momentum, float *psw_grad)
{
  if (o == REF_ORDER_NORMATIVE)
    return ref_backward(b, l, cfg, grad_output, momentum, psw_grad, NULL);
  if (o == REF_ORDER_TRITON)
    return ref_backward_triton(b, l, cfg, grad_output, momentum, psw_grad, NULL, NULL);
  tbe_status s = fbgemm_refuses(b, cfg);
  float *G = s.code == TBE_OK ? malloc(sizeof(float) * (size_t)(l->out_elems + 1)) : NULL;
  if (s.code == TBE_OK && !G)
    s = tbe_error(TBE_ENOMEM, "grad_output", -1, "cannot widen %lld gradients",
                  (long long)l->out_elems);
  /* it clamps in the gradient's own dtype: to the clip value rounded into it */
  const float clip = b->out_dtype == TBE_FP32 ? cfg->clip
                                              : ref_half_to_float(ref_float_to_half(cfg->clip));
  for (int64_t i = 0; s.code == TBE_OK && i < l->out_elems; i++) {
    float v = b->out_dtype == TBE_FP32 ? ((const float *)grad_output)[i]
                                       : ref_half_to_float(((const uint16_t *)grad_output)[i]);
    G[i] = clip > 0.0f ? fminf(fmaxf(v, -clip), clip) : v;
  }
  if (s.code == TBE_OK && psw_grad && b->per_sample_weights)
    fbgemm_psw_grad(b, l, G, psw_grad);
  for (int32_t t0 = 0, t1; s.code == TBE_OK && cfg->opt.kind != REF_OPT_NONE && t0 < b->T;
       t0 = t1) {
    for (t1 = t0 + 1; t1 < b->T && b->feature_table_map[t1] == b->feature_table_map[t0]; t1++)
      ;
    int64_t rows_before = 0; /* the momentum of table j starts after the rows of those before */
    for (int32_t j = 0; j < b->feature_table_map[t0]; j++)
      rows_before += b->E[j];
    s = fbgemm_group(b, l, cfg, G, t0, t1, momentum, rows_before);
  }
  free(G);
  return s;
}

/* Triton: whether a lookup of a table that starts at flat element `start` (a row of D) is
 * pruned: its read lands on the D elements before start. */
static int triton_pruned_before(const tbe_batch *b, const tbe_layout *l, int64_t start)
{
  for (int64_t i = 0; i < l->total_B; i++) {
    const int32_t j = b->feature_table_map[l->bag_feature[i]];
    if (b->table_offset[j] != start)
      continue;
    for (int64_t p = tbe_iget(b->offsets, b->itype, i);
         p < tbe_iget(b->offsets, b->itype, i + 1); p++)
      if (tbe_iget(b->indices, b->itype, p) == -1)
        return 1;
  }
  return 0;
}

/* FBGEMM's CPU: the rule of backward_order.c that breaks TBE_SEMANTICS at weight element (w) or
 * momentum row k, or NULL. */
static const char *fbgemm_defect(const tbe_batch *b, const ref_bwd_config *cfg, int w, int64_t k)
{
  int32_t j = -1;
  for (int64_t row = 0, t = 0; t < b->num_tables && j < 0; row += b->E[t++])
    if (w ? k < b->table_offset[t + 1] : k < row + b->E[t])
      j = (int32_t)t;
  if (j < 0 || cfg->opt.kind == REF_OPT_NONE)
    return NULL;
  /* the table's groups: maximal runs of adjacent features mapped to it */
  int groups = 0, single = 0;
  for (int32_t t0 = 0, t1; t0 < b->T; t0 = t1) {
    for (t1 = t0 + 1; t1 < b->T && b->feature_table_map[t1] == b->feature_table_map[t0]; t1++)
      ;
    if (b->feature_table_map[t0] == j) {
      groups++;
      single |= t1 - t0 == 1;
    }
  }
  if (groups > 1)
    return "a table shared by features that are not adjacent is updated once per group";
  if (cfg->opt.kind == REF_OPT_ROWWISE_ADAGRAD && cfg->opt.wd != REF_WD_NONE &&
      b->wdtype == TBE_FP32 && b->out_dtype == TBE_FP32 && single && b->pool != TBE_POOL_NONE)
    return "L2 and DECOUPLE weight decay dropped on the fp32 fast path";
  if (cfg->opt.kind == REF_OPT_SGD && b->wdtype == TBE_FP16 && w)
    return "fp16 SGD rounds the step to fp16 before the update";
  if (cfg->clip > 0 && b->out_dtype == TBE_FP16)
    return "clipping clamps an fp16 gradient to fp16(clip), not clip";
  return NULL;
}

const char *ref_order_defect(ref_order o, const tbe_batch *b, const tbe_layout *l,
                             const ref_bwd_config *cfg, const char *output, int64_t k)
{
  static const char pruned[] = "a pruned row (-1) read and updated as the D elements before its "
                               "table (the previous table's last row)";
  const int wts = !strcmp(output, "weights");
  if (o == REF_ORDER_FBGEMM_CPU)
    return cfg && (wts || !strcmp(output, "momentum")) ? fbgemm_defect(b, cfg, wts, k) : NULL;
  if (o != REF_ORDER_TRITON)
    return NULL;
  if (!strcmp(output, "output") && l->bag_out) {
    /* the bag whose output row holds k */
    for (int64_t i = 0; i < l->total_B; i++) {
      const int32_t j = b->feature_table_map[l->bag_feature[i]];
      if (k < l->bag_out[i] || k >= l->bag_out[i] + b->D[j])
        continue;
      for (int64_t p = tbe_iget(b->offsets, b->itype, i);
           p < tbe_iget(b->offsets, b->itype, i + 1); p++)
        if (tbe_iget(b->indices, b->itype, p) == -1)
          return pruned;
      if (b->wdtype == TBE_FP32 && b->out_dtype != TBE_FP32)
        return b->out_dtype == TBE_FP16 ? "double rounding: the fp64 sum stored through fp32 "
                                          "into fp16"
                                        : "double rounding: the fp64 sum stored through fp32 "
                                          "into bf16";
      return NULL;
    }
    return NULL;
  }
  /* weights: element k; momentum: row k (rows numbered across the tables) */
  const int w = wts;
  if (!w && strcmp(output, "momentum"))
    return NULL;
  int64_t row = b->E[0]; /* table j's first row */
  for (int32_t j = 1; j < b->num_tables; row += b->E[j++])
    if ((w ? k >= b->table_offset[j] - b->D[j] && k < b->table_offset[j] : k == row - 1) &&
        triton_pruned_before(b, l, b->table_offset[j]))
      return pruned;
  return NULL;
}
