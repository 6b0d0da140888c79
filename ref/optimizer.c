/* optimizer.c: SGD and row-wise Adagrad row updates and the RNE / stochastic write-back, in the
 * order optimizer.h states. Not the gradient sums (backward.c) nor their bounds (backward_exact.c).
 *
 * Accumulation order: the only sums here are ref_lane_dot's: 32 lanes, each a chain of fmaf over
 * the columns d = l, l+32, ... in ascending order from +0, then a butterfly s_l + s_(l xor o) for
 * o = 16, 8, 4, 2, 1, of which only the lanes that reach s_0 are computed. Speed, which no bit
 * depends on: the hot loops are built twice (target_clones), for x86-64 with FMA and AVX2 and
 * for the baseline; fmaf, +, * are the same IEEE operations in both.
 */
#include "optimizer.h"

#include <math.h>
#include <string.h>

#include "speed.h"
#include "half.h"
#include "philox.h"

#define LANES 32

const char *ref_opt_name(ref_opt_kind k)
{
  static const char *const n[] = {"none", "sgd", "rowwise_adagrad"};
  return n[k];
}

const char *ref_wd_name(ref_wd_mode m)
{
  static const char *const n[] = {"none", "l2", "decouple"};
  return n[m];
}

REF_CLONES float ref_lane_dot(const float *a, const float *b, int32_t D)
{
  float s[LANES];
  for (int l = 0; l < LANES; l++)
    s[l] = 0.0f;
  int32_t d0 = 0;
  for (; d0 + LANES <= D; d0 += LANES) /* 32 columns at a time: each lane's chain in order */
    for (int l = 0; l < LANES; l++)
      s[l] = fmaf(a[d0 + l], b[d0 + l], s[l]);
  for (int l = 0; d0 + l < D; l++)
    s[l] = fmaf(a[d0 + l], b[d0 + l], s[l]);
  /* The butterfly's lanes that reach s_0: at step o those are l < o, and for them l xor o is
   * l + o, so s_l = s_l + s_(l + o), the operands in the butterfly's order. */
  for (int o = LANES / 2; o >= 1; o /= 2)
    for (int l = 0; l < o; l++)
      s[l] = s[l] + s[l + o];
  return s[0];
}

void ref_load_row(const void *src, tbe_dtype t, int32_t D, float *dst)
{
  if (t == TBE_FP32)
    memcpy(dst, src, sizeof(float) * (size_t)D);
  else if (t == TBE_FP16)
    ref_half_to_float_row(src, D, dst);
  else
    ref_bf16_to_float_row(src, D, dst);
}

REF_CLONES static void sgd_row(float lr, int32_t D, const float *g, float *w)
{
  for (int32_t d = 0; d < D; d++)
    w[d] = fmaf(-lr, g[d], w[d]);
}

REF_CLONES static void l2_grad(float lambda, int32_t D, const float *g, const float *w, float *gd)
{
  for (int32_t d = 0; d < D; d++)
    gd[d] = fmaf(lambda, w[d], g[d]);
}

REF_CLONES static void adagrad_step(float mu, float c, int32_t D, const float *g, float *w)
{
  for (int32_t d = 0; d < D; d++)
    w[d] = fmaf(-mu, g[d], c == 1.0f ? w[d] : c * w[d]);
}

void ref_opt_update_row(const ref_opt_config *o, int32_t D, const float *g, float *w, float *m)
{
  if (o->kind == REF_OPT_SGD) {
    sgd_row(o->lr, D, g, w);
    return;
  }
  float gd_l2[TBE_MAX_D];
  const float *gd = g;
  if (o->wd == REF_WD_L2) {
    l2_grad(o->lambda, D, g, w, gd_l2);
    gd = gd_l2;
  }
  float s = ref_lane_dot(gd, gd, D);
#if defined(TBE_FAULT_MOMENTUM_D_TWICE) /* planted: the mean square divided by D twice */
  float mm = *m + s / (float)D / (float)D;
#else
  float mm = *m + s / (float)D;
#endif
  *m = mm;
#if defined(TBE_FAULT_EPS_IN_SQRT) /* planted: eps added under the root */
  float mu = o->lr / sqrtf(mm + o->eps);
#else
  float mu = o->lr / (sqrtf(mm) + o->eps);
#endif
  float c = o->wd == REF_WD_L2         ? fmaf(-mu, o->lambda, 1.0f)
            : o->wd == REF_WD_DECOUPLE ? fmaf(-o->lr, o->lambda, 1.0f)
                                       : 1.0f;
  adagrad_step(mu, c, D, g, w);
}

uint32_t ref_sr_draw(const ref_opt_config *o, int32_t col, uint64_t row)
{
  const uint32_t ctr[4] = {(uint32_t)col, (uint32_t)row, (uint32_t)(row >> 32), o->step};
  const uint32_t key[2] = {(uint32_t)o->seed, (uint32_t)(o->seed >> 32)};
  uint32_t out[4];
  ref_philox4x32_10(ctr, key, out);
  return out[0];
}

uint16_t ref_sr_round(float x, tbe_dtype t, uint32_t u)
{
  const int fp16 = t == TBE_FP16;
  uint16_t h = fp16 ? ref_float_to_half(x) : ref_float_to_bf16(x);
  if (!isfinite(x))
    return h;
  float (*widen)(uint16_t) = fp16 ? ref_half_to_float : ref_bf16_to_float;
  double ax = fabs((double)x);
  if (fabs((double)widen(h)) > ax) /* RNE went away from zero (or to Inf): one step back */
    h = (uint16_t)(h - 1);
  const int man = fp16 ? 10 : 7, bias = fp16 ? 15 : 127;
  int field = (h & 0x7FFF) >> man;
  double q = ldexp(1.0, (field ? field : 1) - bias - man);
  double frac = (ax - fabs((double)widen(h))) / q; /* exact: q is a power of two */
  if ((double)u < frac * 0x1p32)
    h = (uint16_t)(h + 1); /* the magnitude bits step away from zero, past the top into Inf */
  return h;
}

void ref_store_row(const ref_opt_config *o, tbe_dtype t, const float *w, int32_t D, uint64_t row,
                   void *dst)
{
  uint16_t *h = dst;
  if (t == TBE_FP32)
    memcpy(dst, w, sizeof(float) * (size_t)D);
  else if (o->sr)
    for (int32_t d = 0; d < D; d++)
      h[d] = ref_sr_round(w[d], t, ref_sr_draw(o, d, row));
  else if (t == TBE_FP16)
    ref_float_to_half_row(w, D, h);
  else
    ref_float_to_bf16_row(w, D, h);
}
