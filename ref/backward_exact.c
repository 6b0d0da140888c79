/* backward_exact.c: the exact twin of the backward for bwd.combine=atomic: each updated weight
 * and momentum as an exact value with a derived bound. Not the normative backward (backward.c).
 *
 * What is free in atomic mode: only the order in which a long run's k chunk partials p_1..p_k
 * (each deterministic: a sequential fp32 sum) are added. They are added in fp64, widened
 * exactly, then rounded once to fp32 (ref/SEMANTICS.md 4). Any order or tree of k - 1 fp64
 * adds gives T with |T - S| <= gamma64(k-1) * A, S = sum p_i, A = sum |p_i| (Higham, Thm 4.3
 * for any summation order; the p_i are multiples of 2^-149, far above fp64's underflow), and
 * g~ = fl32(T) with |g~ - T| <= u32 * |T| + 2^-150. S and A are summed here in fp64 too, with
 * |S^ - S| <= gamma64(k) * A and A <= A^ (1 + 2 gamma64(k)), so with e = 2 gamma64(k) A^
 * (1 + 2 gamma64(k)):  |g~ - S^| <= e32(|S^| + e) + e. At k = 11,719 that is one fp32 rounding
 * plus 2.6e-12 * A: a dropped partial shows. Runs with k < 2 do not depend on the order: their
 * rows are ref_backward's bits with bound 0.
 *
 * Propagation through section 5 (a running-error analysis: the first-order perturbation of each
 * formula in its inputs' errors, with the second-order products kept so the bound is rigorous).
 * Every quantity is a pair (v, r): v computed in fp64 from exact inputs, r such that
 * |value the fp32 formula computes from perturbed inputs - v| <= r. With e32(m) = u32*m + 2^-150
 * (one fp32 rounding of a value of magnitude <= m) and s64 = 2*u64*|v| (v's own fp64 rounding):
 *   a + b:      r = ra + rb + e32(|v| + ra + rb) + s64
 *   a * b:      p = |a| rb + |b| ra + ra rb;              r = p + e32(|v| + p) + s64
 *   fma(a,b,c): p = |a| rb + |b| ra + ra rb + rc;         r = p + e32(|v| + p) + s64
 *   a / b:      p = (ra + |v| rb) / (|b| - rb)  (|b| > rb, else no bound: +Inf), since
 *               a~/b~ - a/b = ((a~ - a) b - a (b~ - b)) / (b b~);      r = p + e32(|v| + p) + s64
 *   sqrt(a):    p = min(ra / sqrt(a), sqrt(ra)), since |sqrt(a~) - sqrt(a)| = |a~ - a| /
 *               (sqrt(a~) + sqrt(a));                       r = p + e32(|v| + p) + s64
 *   sum of squares of gd (step 2): see rb_sum_squares; p = sum (2 |gd| r_gd + r_gd^2) and
 *               r = p + gamma32(h) * sum (|gd| + r_gd)^2 + D * 2^-150 * (1 + gamma32(h))
 *               + gamma64(D + 1) * v, h = ceil(D/32) + 5.
 * Constants (lr, eps, lambda, D, the weights and momentum before the update) are exact (r = 0),
 * and so are c = 1 (NONE) and c = fma(-lr, lambda, 1) (DECOUPLE), which both sides compute from
 * the same fp32 constants: for them v is the fp32 value itself. The formulas are then walked in
 * section 5's order: gd = g or fma(lambda, w, g); s; q = s / D; m' = m + q (the momentum's
 * (v, r)); mu = lr / (sqrt(m') + eps); c; w' = fma(-mu, g, c * w) (SGD: w' = fma(-lr, g, w)).
 * Write-back of FP16/BF16 weights adds ref_store_error(t, |v| + r) for round-to-nearest and
 * twice that for stochastic rounding (the stored value is one of the two neighbours of the
 * computed one, at most one spacing away; the random draw is the same, the bracket may not be).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "backward_impl.h"
#include "error_bound.h"
#include "half.h"
#include "speed.h"

/* A computed quantity: exact value and the radius around it. */
typedef struct {
  double v, r;
} rb;

static rb rb_const(double v) { return (rb){v, 0.0}; }

/* One fp32 rounding of a result v whose inputs contribute p, plus v's fp64 rounding. */
static rb rb_round(double v, double p)
{
  return (rb){v, p + ref_store_error(TBE_FP32, fabs(v) + p) + 2.0 * REF_U64 * fabs(v)};
}

static rb rb_add(rb a, rb b) { return rb_round(a.v + b.v, a.r + b.r); }

static rb rb_mul(rb a, rb b)
{
  return rb_round(a.v * b.v, fabs(a.v) * b.r + fabs(b.v) * a.r + a.r * b.r);
}

static rb rb_fma(rb a, rb b, rb c)
{
  return rb_round(fma(a.v, b.v, c.v), fabs(a.v) * b.r + fabs(b.v) * a.r + a.r * b.r + c.r);
}

static rb rb_div(rb a, rb b)
{
  double v = a.v / b.v;
  if (!(fabs(b.v) > b.r))
    return (rb){v, INFINITY};
  return rb_round(v, (a.r + fabs(v) * b.r) / (fabs(b.v) - b.r));
}

static rb rb_sqrt(rb a)
{
  double v = sqrt(a.v);
  double p = sqrt(a.r);
  if (v > 0 && a.r / v < p)
    p = a.r / v;
  return rb_round(v, p);
}

static rb rb_neg(rb a) { return (rb){-a.v, a.r}; }

/* Step 2's 32-lane sum of squares of gd[0..D). The fp32 computation: lane l runs
 * s_l = fma(gd_d, gd_d, s_l) for d = l, l+32, ... from +0 (ceil(D/32) fmas), then five butterfly
 * adds. With underflow, one rounding is fl(x) = x (1 + delta) + eta, |delta| <= u32,
 * |eta| <= 2^-150 (half the subnormal spacing 2^-149), and eta = 0 for an add: fp32 values are
 * multiples of 2^-149, so is their sum, and a sum in the subnormal range is exact. An fma's
 * exact a*b + c is not such a multiple, so each of the D fmas (one per term, in its lane) can
 * lose up to 2^-150 outright, even to a result of 0 (gd_d^2 just below 2^-150 rounds to +0).
 * Each term, and each eta, then passes through at most h = ceil(D/32) + 5 roundings (the rest
 * of its lane's chain, then the butterfly), so
 *   |s~ - sum gd_d^2| <= gamma32(h) * sum gd_d^2 + D * 2^-150 * (1 + gamma32(h)),
 * where the second term is the underflow allowance (the old h * 2^-149 counted one eta per
 * rounding on a path, not one per fma: 69 * 2^-149 at D = 2048 against 2048 * 2^-150).
 * Perturbed inputs (r_gd) add p to the exact sum and are in the gamma term through m; v's own
 * fp64 sum of D products is within gamma64(D + 1) * v. */
static rb rb_sum_squares(const rb *gd, int32_t D, int free_order)
{
  double v = 0, p = 0, m = 0;
  for (int32_t d = 0; d < D; d++) {
    v += gd[d].v * gd[d].v;
    p += 2.0 * fabs(gd[d].v) * gd[d].r + gd[d].r * gd[d].r;
    m += (fabs(gd[d].v) + gd[d].r) * (fabs(gd[d].v) + gd[d].r);
  }
  int64_t h = free_order ? D + 1 : (D + 31) / 32 + 5; /* any order: a square and D adds */
  double gh = ref_gamma(h, REF_U32);
  return (rb){v, p + gh * m + (double)D * 0x1p-150 * (1.0 + gh) + ref_gamma(D + 1, REF_U64) * v};
}

double ref_bwd_sum_squares_bound(const float *gd, int32_t D, double *exact)
{
  rb x[TBE_MAX_D];
  for (int32_t d = 0; d < D; d++)
    x[d] = rb_const(gd[d]);
  rb s = rb_sum_squares(x, D, 0);
  *exact = s.v;
  return s.r;
}

/* The bound of the write-back of a computed weight x (v, r) into dtype t. */
static double store_bound(const ref_opt_config *o, tbe_dtype t, rb x)
{
  if (t == TBE_FP32)
    return x.r;
  double e = ref_store_error(t, fabs(x.v) + x.r);
  return x.r + (o->sr ? 2.0 * e : e);
}

/* a*b + c as one fma, or with free_order as either that or a product rounded apart, then
 * added (its bound, one rounding more, covers both). */
static rb rb_fma_or_split(rb a, rb b, rb c, int free_order)
{
  return free_order ? rb_add(rb_mul(a, b), c) : rb_fma(a, b, c);
}

/* Section 5 on gradients g (v, r) for one row of D weights w (exact) and momentum *m: writes the
 * weights' (exact, bound) and, for Adagrad, the momentum's. gd is D rb of scratch. free_order:
 * the formulas in any order of fp32 operations (ref_backward_exact_free). */
static void rb_update(const ref_opt_config *o, tbe_dtype t, int32_t D, const rb *g, const float *w,
                      float m, rb *gd, double *w_exact, double *w_bound, double *m_exact,
                      double *m_bound, int free_order)
{
  if (o->kind == REF_OPT_SGD) {
    for (int32_t d = 0; d < D; d++) {
      rb x = rb_fma_or_split(rb_const(-(double)o->lr), g[d], rb_const(w[d]), free_order);
      w_exact[d] = x.v;
      w_bound[d] = store_bound(o, t, x);
    }
    return;
  }
  rb lambda = rb_const(o->lambda);
  for (int32_t d = 0; d < D; d++)
    gd[d] = o->wd == REF_WD_L2 ? rb_fma(lambda, rb_const(w[d]), g[d]) : g[d];
  rb mm = rb_add(rb_const(m), rb_div(rb_sum_squares(gd, D, free_order), rb_const(D)));
  *m_exact = mm.v;
  *m_bound = mm.r;
  rb mu = rb_div(rb_const(o->lr), rb_add(rb_sqrt(mm), rb_const(o->eps)));
  rb decouple = free_order ? rb_fma_or_split(rb_const(-(double)o->lr), lambda, rb_const(1.0), 1)
                           : rb_const(fmaf(-o->lr, o->lambda, 1.0f));
  rb c = o->wd == REF_WD_L2         ? rb_fma_or_split(rb_neg(mu), lambda, rb_const(1.0), free_order)
         : o->wd == REF_WD_DECOUPLE ? decouple
                                    : rb_const(1.0);
  for (int32_t d = 0; d < D; d++) {
    rb cw = c.v == 1.0 && c.r == 0.0 ? rb_const(w[d]) : rb_mul(c, rb_const(w[d]));
    rb x = rb_fma_or_split(rb_neg(mu), g[d], cw, free_order);
    w_exact[d] = x.v;
    w_bound[d] = store_bound(o, t, x);
  }
}

void ref_bwd_update_bound(const ref_opt_config *o, tbe_dtype t, int32_t D, const double *g_exact,
                          const double *g_bound, const float *w, float m, double *w_exact,
                          double *w_bound, double *m_exact, double *m_bound)
{
  rb g[TBE_MAX_D], gd[TBE_MAX_D];
  for (int32_t d = 0; d < D; d++)
    g[d] = (rb){g_exact[d], g_bound[d]};
  double mv = 0.0, mr = 0.0;
  rb_update(o, t, D, g, w, m, gd, w_exact, w_bound, &mv, &mr, 0);
  if (m_exact) {
    *m_exact = mv;
    *m_bound = mr;
  }
}

/* Widens element i of weights of dtype t to double. */
static double weight_value(const void *weights, tbe_dtype t, int64_t i)
{
  if (t == TBE_FP32)
    return ((const float *)weights)[i];
  uint16_t h = ((const uint16_t *)weights)[i];
  return t == TBE_FP16 ? ref_half_to_float(h) : ref_bf16_to_float(h);
}

/* Run r with fewer than two chunks: ref_backward's arithmetic, bound 0. */
static void exact_short(const ref_bwd_work *w, int64_t r, int32_t j, int64_t row, float m,
                        float *scratch, double *w_exact, double *w_bound, double *m_exact,
                        double *m_bound)
{
  const tbe_batch *b = w->b;
  int32_t D = b->D[j];
  float *g = scratch, *part = scratch + TBE_MAX_D, *wr = scratch + 2 * TBE_MAX_D;
  float stored[TBE_MAX_D]; /* D weights of the weight dtype */
  uint64_t key = (uint64_t)w->tr.rows_cumsum[j] + (uint64_t)row;
  size_t elem = tbe_dtype_size(b->wdtype);
  int64_t at = ref_bwd_weight_at(b, j, row);
  ref_bwd_row_grad(w, r, D, g, part);
  ref_load_row((const char *)b->weights + (size_t)at * elem, b->wdtype, D, wr);
  ref_opt_update_row(&w->cfg->opt, D, g, wr, &m);
  ref_store_row(&w->cfg->opt, b->wdtype, wr, D, key, stored);
  for (int32_t d = 0; d < D; d++) {
    w_exact[at + d] = weight_value(stored, b->wdtype, d);
    w_bound[at + d] = 0.0;
  }
  if (m_exact) {
    m_exact[key] = m;
    m_bound[key] = 0.0;
  }
}

/* Run r with k >= 2 chunks: S, A per column from the partials, g~'s bound (the header), then
 * rb_update. */
static void exact_long(const ref_bwd_work *w, int64_t r, int32_t j, int64_t row, float m,
                       float *scratch, double *A, rb *g, rb *gd, double *w_exact,
                       double *w_bound, double *m_exact, double *m_bound, int free_order)
{
  const tbe_batch *b = w->b;
  int32_t D = b->D[j];
  float *part = scratch, *wr = scratch + TBE_MAX_D;
  int64_t s = w->tr.run_start[r], e = w->tr.run_start[r + 1], chunk = w->cfg->chunk;
  int64_t k = ref_bwd_chunks(w, r);
  for (int32_t d = 0; d < D; d++)
    g[d].v = A[d] = 0.0;
  for (int64_t c = s; c < e; c += chunk) {
    ref_bwd_sum_entries(w, c, c + chunk < e ? c + chunk : e, D, part);
    for (int32_t d = 0; d < D; d++) {
      g[d].v += part[d];
      A[d] += fabs((double)part[d]);
    }
  }
  double g64 = ref_gamma(k, REF_U64);
  for (int32_t d = 0; d < D; d++) {
    double order = 2.0 * g64 * A[d] * (1.0 + 2.0 * g64); /* the header's e */
    /* free order: the k single contributions (chunk 1) summed in fp32 in any order, each term
     * one rounding away from the exact product an fma would keep (ref_backward_exact_free) */
    g[d].r = free_order ? ref_gamma(k + 1, REF_U32) * A[d] * (1.0 + 2.0 * g64) + order +
                              (double)k * 0x1p-150
                        : ref_store_error(TBE_FP32, fabs(g[d].v) + order) + order;
  }
  uint64_t key = (uint64_t)w->tr.rows_cumsum[j] + (uint64_t)row;
  int64_t at = ref_bwd_weight_at(b, j, row);
  ref_load_row((const char *)b->weights + (size_t)at * tbe_dtype_size(b->wdtype), b->wdtype, D,
               wr);
  double mv = 0.0, mr = 0.0;
  rb_update(&w->cfg->opt, b->wdtype, D, g, wr, m, gd, w_exact + at, w_bound + at, &mv, &mr,
            free_order);
  if (m_exact) {
    m_exact[key] = mv;
    m_bound[key] = mr;
  }
}

/* ref_backward_exact, or with free_order ref_backward_exact_free (cfg already with chunk 1). */
static tbe_status backward_exact(const tbe_batch *b, const tbe_layout *l,
                                 const ref_bwd_config *cfg, const void *grad_output,
                                 const float *momentum, double *w_exact, double *w_bound,
                                 double *m_exact, double *m_bound, int free_order)
{
  const int adagrad = cfg->opt.kind == REF_OPT_ROWWISE_ADAGRAD;
  if (adagrad && (!momentum || !m_exact || !m_bound))
    return tbe_error(TBE_EINVAL, "momentum", -1, "row-wise Adagrad needs the momentum arrays");
  int64_t total = b->table_offset[b->num_tables], rows = ref_bwd_rows(b);
#pragma omp parallel for schedule(static) if (total > REF_PAR_MIN)
  for (int64_t i = 0; i < total; i++) {
    w_exact[i] = weight_value(b->weights, b->wdtype, i);
    w_bound[i] = 0.0;
  }
  if (adagrad)
#pragma omp parallel for schedule(static) if (rows > REF_PAR_MIN)
    for (int64_t i = 0; i < rows; i++) {
      m_exact[i] = momentum[i];
      m_bound[i] = 0.0;
    }
  if (cfg->opt.kind == REF_OPT_NONE)
    return tbe_ok();
  ref_bwd_work w;
  tbe_status st = ref_bwd_work_init(&w, b, l, cfg, grad_output, NULL);
  if (st.code)
    return st;
  double *mx = adagrad ? m_exact : NULL, *mb = adagrad ? m_bound : NULL;
#pragma omp parallel if (w.tr.n > REF_PAR_MIN)
  {
    float scratch[TBE_MAX_D * 3]; /* rows: gradient, partial, weights */
    double A[TBE_MAX_D];
    rb g[TBE_MAX_D], gd[TBE_MAX_D];
#pragma omp for schedule(dynamic, 64)
    for (int64_t r = 0; r < w.tr.num_runs; r++) {
      int64_t row;
      int32_t j = ref_transpose_table(&w.tr, b, l, r, &row);
      uint64_t key = (uint64_t)w.tr.rows_cumsum[j] + (uint64_t)row;
      float m = adagrad ? momentum[key] : 0.0f;
      if (ref_bwd_chunks(&w, r) < 2 && !free_order)
        exact_short(&w, r, j, row, m, scratch, w_exact, w_bound, mx, mb);
      else
        exact_long(&w, r, j, row, m, scratch, A, g, gd, w_exact, w_bound, mx, mb, free_order);
    }
  }
  ref_bwd_work_free(&w);
  return tbe_ok();
}

tbe_status ref_backward_exact(const tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                              const void *grad_output, const float *momentum, double *w_exact,
                              double *w_bound, double *m_exact, double *m_bound)
{
  return backward_exact(b, l, cfg, grad_output, momentum, w_exact, w_bound, m_exact, m_bound, 0);
}

tbe_status ref_backward_exact_free(const tbe_batch *b, const tbe_layout *l,
                                   const ref_bwd_config *cfg, const void *grad_output,
                                   const float *momentum, double *w_exact, double *w_bound,
                                   double *m_exact, double *m_bound)
{
  ref_bwd_config c = *cfg; /* every contribution a partial of its own, in any order */
  c.threshold = 1;
  c.chunk = 1;
  c.combine = REF_COMBINE_ATOMIC;
  return backward_exact(b, l, &c, grad_output, momentum, w_exact, w_bound, m_exact, m_bound, 1);
}

tbe_status ref_psw_grad_exact_free(const tbe_batch *b, const tbe_layout *l,
                                   const ref_bwd_config *cfg, const void *grad_output,
                                   double *exact, double *bound)
{
  ref_bwd_work w;
  tbe_status st = ref_bwd_work_init(&w, b, l, cfg, grad_output, NULL);
  if (st.code)
    return st;
  memset(exact, 0, sizeof(double) * (size_t)b->N);
  memset(bound, 0, sizeof(double) * (size_t)b->N);
  for (int64_t i = 0; i < l->total_B; i++) {
    int32_t j = b->feature_table_map[l->bag_feature[i]], D = b->D[j];
    for (int64_t p = tbe_iget(b->offsets, b->itype, i); p < tbe_iget(b->offsets, b->itype, i + 1);
         p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      if (idx == -1)
        continue;
      double S = 0, A = 0;
      for (int32_t d = 0; d < D; d++) { /* each product exact in fp64 (24 by 24 bits) */
        double x = (double)w.g[l->bag_out[i] + d] *
                   weight_value(b->weights, b->wdtype, b->table_offset[j] + idx * D + d);
        S += x;
        A += fabs(x);
      }
      exact[p] = S;
      bound[p] = (ref_gamma(D, REF_U32) + 2.0 * ref_gamma(D, REF_U64)) * A + D * 0x1p-150;
    }
  }
  ref_bwd_work_free(&w);
  return tbe_ok();
}
