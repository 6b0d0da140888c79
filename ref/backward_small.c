/* backward_small.c: the model of the small-table backward (bwd.small_tc: counts^T x G on the
 * tensor cores, through ref_mma_f16_f32) with its eligibility, and its exact twin with bounds.
 * Not the normative backward (backward.c), whose sorted order this path does not follow.
 *
 * Order (the model, = gpu/backward_small.cu). For a taken table j of E rows and D columns, its
 * bags are those of its features in ascending feature order, each feature's bags in order; a
 * feature's bags are cut into segments of REF_SMALL_SEG, a segment into k-steps of 16 bags (the
 * last ones padded with bags of zero counts and zero G). Per bag, G is the normative effective
 * gradient (clip, then MEAN's fp32 1/L: ref_bwd_build_g), hi = fp16_rn(G), lo = fp16_rn(G - hi)
 * (G - hi is exact in fp32: Sterbenz, hi within a factor 2 of G or 0; an empty bag's G is
 * never read, 0 here), and count_r the bag's
 * positions on row r (-1 skipped; L <= 256, so exact in fp16: the forward's A operand values).
 * Per row r and column d, each segment runs two chains from +0, k-step by k-step in order:
 * H = mma(count[16 bags][r], hi[16 bags][d], H), then Lo = the same with lo; the segment's
 * partial is P = H + Lo (one fp32 RN add); the row gradient is P_0, then + P_s for each later
 * segment in order (fp32 RN). Two chains, not one: the lo products then never share an
 * alignment with H's larger ones, and the two MMA dependency chains overlap on the GPU. A
 * k-step whose 16 counts of row r are all zero is skipped here: the model returns its C
 * unchanged then (every product is 0 with a finite hi, and C is never -0: chains start at +0 and
 * a zero sum is +0). Touched rows (some count > 0) then take section 5's row update, in the
 * normative order; untouched rows keep their bits.
 *
 * Bound (ref_backward_small_exact), per (r, d). S = sum_b c_b G_b exactly (fp64: the products
 * are exact, the sum's own error gamma64(n) * A_G with A_G = sum_b c_b |G_b|). One chain of K
 * k-steps holding a count of r, over terms x = c_b * v_b (v = hi or lo) with A = sum |x|: each
 * step is the model's fused sum (ref/SEMANTICS.md 6): the term at emax is exact, each of the
 * other 16 loses < 2^(emax - 25) to the truncation, the RZ into fp32 < 2^-23 |result| (or 2^-149
 * when subnormal); 2^emax <= A + s + 2^-126 (a product's exponent gives 2^(ec+ev) <= c *
 * max(|v|, 2^-14), s = 2^-14 * the counts of bags whose v is an fp16 subnormal; C's <= max(|C|,
 * 2^-126)), and truncation and RZ never grow a magnitude, so |C| <= A: the chain is within
 *   e_v = K * ((16 * 2^-25 + 2u) * A + 16 * 2^-25 * (s + 2^-126) + 2^-149)
 * of its exact sum, forward_exact.c's bound of the same steps. The partial P = fl(H + Lo) adds
 * st = ref_store_error(FP32, A_hi + e_hi + A_lo + e_lo). The split leaves r_b = G_b - hi_b - lo_b
 * with |r_b| <= ref_store_error(FP16, |G_b - hi_b|): half an ulp of lo's binade, or 2^-25 where
 * lo falls into fp16's subnormals (lo underflows there), so the segment's exact hi + lo sums
 * are within R = sum_b c_b * that of its part of S. The n partials, each |P_s| <= M_s = A_hi +
 * A_lo + e_hi + e_lo + st, are then added in fp32 (gamma32(n-1) * sum M_s, Higham 4.3): the
 * row gradient is within
 *   e = sum_s (e_hi + e_lo + st + R)_s + gamma32(n-1) * sum_s M_s + gamma64(n_b) * A_G
 * of S (every A taken times 1 + 2 gamma64(n_b) for its own fp64 sum). It then goes through
 * section 5 by ref_bwd_update_bound, the running-error propagation atomic mode uses.
 */
#include "backward_small.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backward_impl.h"
#include "error_bound.h"
#include "half.h"

void ref_small_tc_tables(const tbe_batch *b, const ref_bwd_config *cfg, const unsigned char *small,
                         unsigned char *tables)
{
  for (int32_t j = 0; j < b->num_tables; j++)
    tables[j] = cfg->opt.kind == REF_OPT_ROWWISE_ADAGRAD;
  unsigned char *seen = calloc((size_t)b->num_tables + 1, 1);
  for (int32_t t = 0; t < b->T; t++) {
    int32_t j = b->feature_table_map[t];
    seen[j] = 1;
    if (!small[t])
      tables[j] = 0;
  }
  for (int32_t j = 0; j < b->num_tables; j++)
    tables[j] = tables[j] && seen[j];
  free(seen);
}

/* Whether fp16_rn(x) is finite (not NaN, |x| < 65520). */
static int hi_finite(float x) { return (ref_float_to_half(x) & 0x7C00) != 0x7C00; }

void ref_small_tc_taken(const tbe_batch *b, const tbe_layout *l, const float *g,
                        const unsigned char *tables, unsigned char *taken)
{
  memcpy(taken, tables, (size_t)b->num_tables);
  for (int64_t i = 0; i < l->total_B; i++) {
    int32_t j = b->feature_table_map[l->bag_feature[i]];
    if (!taken[j])
      continue;
    int64_t L = tbe_iget(b->offsets, b->itype, i + 1) - tbe_iget(b->offsets, b->itype, i);
    int ok = L <= REF_SMALL_HIST;
    for (int32_t d = 0; ok && L > 0 && d < b->D[j]; d++)
      ok = hi_finite(g[l->bag_out[i] + d]);
    taken[j] = (unsigned char)ok;
  }
}

tbe_status ref_small_tc_taken_from(const tbe_batch *b, const tbe_layout *l,
                                   const ref_bwd_config *cfg, const void *grad_output,
                                   const unsigned char *tables, unsigned char *taken)
{
  float *g = malloc(sizeof(float) * (size_t)(l->out_elems + 1));
  if (!g)
    return tbe_error(TBE_ENOMEM, "grad_output", -1, "cannot allocate the effective gradient");
  ref_bwd_build_g(b, l, cfg->clip, grad_output, g);
  ref_small_tc_taken(b, l, g, tables, taken);
  free(g);
  return tbe_ok();
}

/* One segment's operands: bags [bag0, bag0 + n) of table j: fp16 counts a[q][r] (r < E) and
 * G's parts hi[q][d], lo[q][d]; n <= REF_SMALL_SEG. */
typedef struct {
  uint16_t a[REF_SMALL_SEG][REF_SMALL_MAX_E];
  uint16_t hi[REF_SMALL_SEG][128], lo[REF_SMALL_SEG][128];
  float g[REF_SMALL_SEG][128];
  int64_t n;
} seg_ops;

static void seg_load(const tbe_batch *b, const tbe_layout *l, const float *g, int32_t j,
                     int64_t bag0, int64_t n, seg_ops *s)
{
  int32_t D = b->D[j];
  memset(s->a, 0, sizeof s->a);
  s->n = n;
  for (int64_t q = 0; q < n; q++) {
    int64_t i = bag0 + q, st = tbe_iget(b->offsets, b->itype, i);
    int32_t count[REF_SMALL_MAX_E] = {0};
    for (int64_t p = st; p < tbe_iget(b->offsets, b->itype, i + 1); p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      if (idx != -1)
        count[idx]++;
    }
    for (int64_t r = 0; r < b->E[j]; r++)
      s->a[q][r] = ref_float_to_half((float)count[r]); /* <= 256: exact */
    const int empty = tbe_iget(b->offsets, b->itype, i + 1) == st;
    for (int32_t d = 0; d < D; d++) {
      float x = empty ? 0.0f : g[l->bag_out[i] + d]; /* an empty bag's G is never read */
      s->g[q][d] = x;
      s->hi[q][d] = ref_float_to_half(x);
      s->lo[q][d] = ref_float_to_half(x - ref_half_to_float(s->hi[q][d])); /* exact difference */
    }
  }
}

/* The 16 counts of row r and the 16 values of column d of part v (hi or lo) of k-step k0. */
static int seg_step(const seg_ops *s, int64_t k0, int64_t r, const uint16_t (*v)[128], int32_t d,
                    uint16_t ak[REF_SMALL_K], uint16_t bk[REF_SMALL_K])
{
  int any = 0;
  for (int64_t k = 0; k < REF_SMALL_K; k++) {
    int in = k0 + k < s->n;
    ak[k] = in ? s->a[k0 + k][r] : 0;
    bk[k] = in ? v[k0 + k][d] : 0;
    any |= ak[k] != 0;
  }
  return any;
}

/* P[r*D + d] = the segment's partial H + Lo (the header's order). */
static void seg_partial(const seg_ops *s, int64_t E, int32_t D, float *P)
{
  for (int64_t r = 0; r < E; r++)
    for (int32_t d = 0; d < D; d++) {
      float h = 0.0f, lo = 0.0f;
      uint16_t ak[REF_SMALL_K], bh[REF_SMALL_K], bl[REF_SMALL_K];
      for (int64_t k0 = 0; k0 < s->n; k0 += REF_SMALL_K) {
        if (!seg_step(s, k0, r, s->hi, d, ak, bh))
          continue;
        seg_step(s, k0, r, s->lo, d, ak, bl);
        h = ref_mma_f16_f32(ak, bh, h);
        lo = ref_mma_f16_f32(ak, bl, lo);
      }
      P[r * D + d] = h + lo;
    }
}

/* The segments of table j: their first bags and sizes, feature by feature in order; returns
 * their number (at most total_B). */
static int64_t table_segments(const tbe_batch *b, const tbe_layout *l, int32_t j, int64_t *bag0,
                              int64_t *n)
{
  int64_t k = 0;
  for (int32_t t = 0; t < b->T; t++) {
    if (b->feature_table_map[t] != j)
      continue;
    for (int64_t s = l->B_offsets[t]; s < l->B_offsets[t + 1]; s += REF_SMALL_SEG) {
      bag0[k] = s;
      n[k++] = l->B_offsets[t + 1] - s < REF_SMALL_SEG ? l->B_offsets[t + 1] - s : REF_SMALL_SEG;
    }
  }
  return k;
}

static void touched_rows(const tbe_batch *b, const tbe_layout *l, int32_t j,
                         unsigned char *touched)
{
  memset(touched, 0, (size_t)b->E[j]);
  for (int32_t t = 0; t < b->T; t++) {
    if (b->feature_table_map[t] != j)
      continue;
    int64_t p0 = tbe_iget(b->offsets, b->itype, l->B_offsets[t]);
    int64_t p1 = tbe_iget(b->offsets, b->itype, l->B_offsets[t + 1]);
    for (int64_t p = p0; p < p1; p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      if (idx != -1)
        touched[idx] = 1;
    }
  }
}

void ref_small_tc_row_grads(const tbe_batch *b, const tbe_layout *l, const float *g, int32_t j,
                            float *grad, unsigned char *touched)
{
  int64_t E = b->E[j], *bag0 = malloc(sizeof(int64_t) * (size_t)(l->total_B + 1));
  int64_t *n = malloc(sizeof(int64_t) * (size_t)(l->total_B + 1));
  int32_t D = b->D[j];
  int64_t nseg = table_segments(b, l, j, bag0, n);
  float *P = malloc(sizeof(float) * (size_t)(nseg * E * D + 1));
#pragma omp parallel
  {
    seg_ops *s = malloc(sizeof *s);
#pragma omp for schedule(dynamic, 1)
    for (int64_t k = 0; k < nseg; k++) {
      seg_load(b, l, g, j, bag0[k], n[k], s);
      seg_partial(s, E, D, P + k * E * D);
    }
    free(s);
  }
  for (int64_t e = 0; e < E * D; e++) {
    float acc = nseg ? P[e] : 0.0f;
    for (int64_t k = 1; k < nseg; k++)
      acc = acc + P[k * E * D + e];
    grad[e] = acc;
  }
  touched_rows(b, l, j, touched);
  free(P);
  free(bag0);
  free(n);
}

/* The first key of table j (its momentum row 0). */
static int64_t table_key(const tbe_batch *b, int32_t j)
{
  int64_t k = 0;
  for (int32_t i = 0; i < j; i++)
    k += b->E[i];
  return k;
}

tbe_status ref_backward_small(tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                              const void *grad_output, const unsigned char *tables,
                              float *momentum, unsigned char *taken)
{
  if (cfg->opt.kind != REF_OPT_ROWWISE_ADAGRAD || !momentum)
    return tbe_error(TBE_EINVAL, "opt", -1, "bwd.small_tc takes row-wise Adagrad (with its "
                     "momentum) only");
  float *g = malloc(sizeof(float) * (size_t)(l->out_elems + 1));
  float *grad = malloc(sizeof(float) * REF_SMALL_MAX_E * 128);
  if (!g || !grad) {
    free(g);
    free(grad);
    return tbe_error(TBE_ENOMEM, "grad_output", -1, "cannot allocate the effective gradient");
  }
  ref_bwd_build_g(b, l, cfg->clip, grad_output, g);
  ref_small_tc_taken(b, l, g, tables, taken);
  size_t elem = tbe_dtype_size(b->wdtype);
  for (int32_t j = 0; j < b->num_tables; j++) {
    if (!taken[j])
      continue;
    int32_t D = b->D[j];
    unsigned char touched[REF_SMALL_MAX_E];
    ref_small_tc_row_grads(b, l, g, j, grad, touched);
    const int64_t key0 = table_key(b, j);
    for (int64_t r = 0; r < b->E[j]; r++) {
      if (!touched[r])
        continue;
      float w[128];
      uint64_t key = (uint64_t)(key0 + r);
      char *at = (char *)b->weights + (size_t)ref_bwd_weight_at(b, j, r) * elem;
      ref_load_row(at, b->wdtype, D, w);
      ref_opt_update_row(&cfg->opt, D, grad + r * D, w, &momentum[key]);
      ref_store_row(&cfg->opt, b->wdtype, w, D, key, at);
    }
  }
  free(g);
  free(grad);
  return tbe_ok();
}

tbe_status ref_backward_small_call(tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                                   const void *grad_output, const unsigned char *tables,
                                   float *momentum, float *psw_grad, unsigned char *taken)
{
  size_t elem = tbe_dtype_size(b->wdtype), wbytes = elem * (size_t)b->table_offset[b->num_tables];
  size_t mbytes = sizeof(float) * (size_t)ref_bwd_rows(b);
  char *keep = malloc(wbytes + mbytes + 1), *small = malloc(wbytes + mbytes + 1);
  if (!keep || !small) {
    free(keep);
    free(small);
    return tbe_error(TBE_ENOMEM, "weights", -1, "cannot copy the weights and momentum");
  }
  memcpy(keep, b->weights, wbytes);
  memcpy(keep + wbytes, momentum, mbytes);
  tbe_status st = ref_backward_small(b, l, cfg, grad_output, tables, momentum, taken);
  memcpy(small, b->weights, wbytes);
  memcpy(small + wbytes, momentum, mbytes);
  memcpy(b->weights, keep, wbytes);
  memcpy(momentum, keep + wbytes, mbytes);
  if (st.code == TBE_OK)
    st = ref_backward(b, l, cfg, grad_output, momentum, psw_grad, NULL);
  for (int32_t j = 0; st.code == TBE_OK && j < b->num_tables; j++) {
    if (!taken[j])
      continue;
    size_t w0 = elem * (size_t)b->table_offset[j], wn = elem * (size_t)(b->E[j] * b->D[j]);
    memcpy((char *)b->weights + w0, small + w0, wn);
    memcpy(momentum + table_key(b, j), (float *)(small + wbytes) + table_key(b, j),
           sizeof(float) * (size_t)b->E[j]);
  }
  free(keep);
  free(small);
  return st;
}

/* Per (r, d) of one segment: the exact sum, its bound and its partial's magnitude bound (the
 * header's S, e_hi + e_lo + st + R and M), and A_G. */
static void seg_exact(const seg_ops *s, int64_t E, int32_t D, double infl, double *S, double *e,
                      double *M, double *AG)
{
  const double trunc = ldexp(REF_SMALL_K, -REF_MMA_ALIGN_BITS), u2 = 2.0 * REF_U32;
  for (int64_t r = 0; r < E; r++)
    for (int32_t d = 0; d < D; d++) {
      double sum = 0, ag = 0, A[2] = {0, 0}, sub[2] = {0, 0}, R = 0;
      int64_t K = 0;
      for (int64_t k0 = 0; k0 < s->n; k0 += REF_SMALL_K) {
        int any = 0;
        for (int64_t q = k0; q < k0 + REF_SMALL_K && q < s->n; q++) {
          double c = ref_half_to_float(s->a[q][r]);
          if (c == 0)
            continue;
          any = 1;
          double x = s->g[q][d], h = ref_half_to_float(s->hi[q][d]);
          double lo = ref_half_to_float(s->lo[q][d]);
          sum += c * x;
          ag += c * fabs(x);
          A[0] += c * fabs(h);
          A[1] += c * fabs(lo);
          sub[0] += (s->hi[q][d] & 0x7C00) == 0 && (s->hi[q][d] & 0x3FF) ? c * 0x1p-14 : 0;
          sub[1] += (s->lo[q][d] & 0x7C00) == 0 && (s->lo[q][d] & 0x3FF) ? c * 0x1p-14 : 0;
          R += c * ref_store_error(TBE_FP16, fabs(x - h));
        }
        K += any;
      }
      double ev[2];
      for (int v = 0; v < 2; v++)
        ev[v] = (double)K * ((trunc + u2) * A[v] * infl + trunc * (sub[v] + 0x1p-126) + 0x1p-149);
      double mag = (A[0] + A[1]) * infl + ev[0] + ev[1];
      double st = ref_store_error(TBE_FP32, mag);
      S[r * D + d] = sum;
      e[r * D + d] = ev[0] + ev[1] + st + R * infl;
      M[r * D + d] = mag + st;
      AG[r * D + d] = ag * infl;
    }
}

/* Table j's exact row gradients S and bounds e ([E*D] each; the header's sum over segments). */
static void table_exact(const tbe_batch *b, const tbe_layout *l, const float *g, int32_t j,
                        double *S, double *e)
{
  int64_t E = b->E[j], *bag0 = malloc(sizeof(int64_t) * (size_t)(l->total_B + 1));
  int64_t *n = malloc(sizeof(int64_t) * (size_t)(l->total_B + 1));
  int32_t D = b->D[j];
  int64_t nseg = table_segments(b, l, j, bag0, n), nb = 0;
  for (int64_t k = 0; k < nseg; k++)
    nb += n[k];
  const double infl = 1.0 + 2.0 * ref_gamma(nb, REF_U64);
  double *x = malloc(sizeof(double) * 4 * (size_t)(nseg * E * D + 1));
  double *xS = x, *xe = x + nseg * E * D, *xM = xe + nseg * E * D, *xA = xM + nseg * E * D;
#pragma omp parallel
  {
    seg_ops *s = malloc(sizeof *s);
#pragma omp for schedule(dynamic, 1)
    for (int64_t k = 0; k < nseg; k++) {
      seg_load(b, l, g, j, bag0[k], n[k], s);
      seg_exact(s, E, D, infl, xS + k * E * D, xe + k * E * D, xM + k * E * D, xA + k * E * D);
    }
    free(s);
  }
  const double combine = nseg > 1 ? ref_gamma(nseg - 1, REF_U32) : 0.0;
  for (int64_t i = 0; i < E * D; i++) {
    double sum = 0, err = 0, mag = 0, ag = 0;
    for (int64_t k = 0; k < nseg; k++) {
      sum += xS[k * E * D + i];
      err += xe[k * E * D + i];
      mag += xM[k * E * D + i];
      ag += xA[k * E * D + i];
    }
    S[i] = sum;
    e[i] = err + combine * mag + ref_gamma(nb, REF_U64) * ag;
  }
  free(x);
  free(bag0);
  free(n);
}

tbe_status ref_backward_small_exact(const tbe_batch *b, const tbe_layout *l,
                                    const ref_bwd_config *cfg, const void *grad_output,
                                    const float *momentum, const unsigned char *taken,
                                    double *w_exact, double *w_bound, double *m_exact,
                                    double *m_bound)
{
  if (cfg->opt.kind != REF_OPT_ROWWISE_ADAGRAD || !momentum)
    return tbe_error(TBE_EINVAL, "opt", -1, "bwd.small_tc takes row-wise Adagrad (with its "
                     "momentum) only");
  float *g = malloc(sizeof(float) * (size_t)(l->out_elems + 1));
  double *S = malloc(sizeof(double) * REF_SMALL_MAX_E * 128 * 2);
  if (!g || !S) {
    free(g);
    free(S);
    return tbe_error(TBE_ENOMEM, "grad_output", -1, "cannot allocate the effective gradient");
  }
  double *e = S + REF_SMALL_MAX_E * 128;
  ref_bwd_build_g(b, l, cfg->clip, grad_output, g);
  size_t elem = tbe_dtype_size(b->wdtype);
  for (int32_t j = 0; j < b->num_tables; j++) {
    if (!taken[j])
      continue;
    int32_t D = b->D[j];
    unsigned char touched[REF_SMALL_MAX_E];
    touched_rows(b, l, j, touched);
    table_exact(b, l, g, j, S, e);
    const int64_t key0 = table_key(b, j);
    for (int64_t r = 0; r < b->E[j]; r++) {
      float w[128];
      int64_t key = key0 + r, at = ref_bwd_weight_at(b, j, r);
      ref_load_row((const char *)b->weights + (size_t)at * elem, b->wdtype, D, w);
      if (touched[r]) {
        ref_bwd_update_bound(&cfg->opt, b->wdtype, D, S + r * D, e + r * D, w, momentum[key],
                             w_exact + at, w_bound + at, &m_exact[key], &m_bound[key]);
        continue;
      }
      for (int32_t d = 0; d < D; d++) {
        w_exact[at + d] = w[d];
        w_bound[at + d] = 0.0;
      }
      m_exact[key] = momentum[key];
      m_bound[key] = 0.0;
    }
  }
  free(g);
  free(S);
  return tbe_ok();
}
