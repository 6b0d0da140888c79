/* forward_small.c: the model of the small-table tensor-core path (histogram counts times the
 * table through a bit-accurate model of one mma.sync), and the path's eligibility.
 * Not the normative forward (forward.c), and not a bound: forward_exact.c bounds this path.
 *
 * Accumulation order (the model, = gpu/forward_small.cu): per bag, counts c_r of the first 256
 * positions (skipping -1), each exact in fp16; per output column, C = +0, then for each 16-row K
 * chunk of the table in order (rows past E are zero) C = ref_mma_f16_f32(counts, rows, C), the
 * H200's fused 16-product sum described at that function; then the positions past the first 256
 * one at a time with __fadd_rn semantics; MEAN multiplies by fl(1/L).
 */
#include "forward_small.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bits.h"
#include "half.h"

int ref_small_eligible(const tbe_batch *b, int32_t t)
{
  int32_t j = b->feature_table_map[t];
  return b->wdtype == TBE_FP16 && b->out_dtype == TBE_FP32 && b->pool != TBE_POOL_NONE &&
         !b->per_sample_weights && b->R == 0 && b->E[j] <= REF_SMALL_MAX_E && b->D[j] >= 64 &&
         b->D[j] <= 128 && b->D[j] % 8 == 0;
}

/* fp16 h as m * 2^e, m signed with the significand's 11 bits (no implicit bit when subnormal). */
static void half_parts(uint16_t h, int64_t *m, int *e)
{
  const int ex = (h >> 10) & 31;
  const int64_t mag = ex ? (0x400 | (h & 0x3FF)) : (h & 0x3FF);
  *e = (ex ? ex : 1) - 25;
  *m = (h & 0x8000) ? -mag : mag;
}

/* RZ_fp32(s * 2^q), exactly (s != 0; the result is never beyond FLT_MAX here). */
static float rz_scaled(int64_t s, int q)
{
  uint64_t mag = s < 0 ? 0 - (uint64_t)s : (uint64_t)s;
  int top = q - 1;
  for (uint64_t x = mag; x; x >>= 1)
    top++;
  const int quantum = top - 23 > -149 ? top - 23 : -149; /* fp32's spacing at 2^top */
  if (quantum > q) {
    mag = quantum - q >= 64 ? 0 : mag >> (quantum - q);
    q = quantum;
  }
  const float r = ldexpf((float)mag, q); /* mag < 2^24: exact */
  return s < 0 ? -r : r;
}

/* Inf and NaN, as measured: any NaN input, Inf * 0, or Infs of both signs give the canonical
 * NaN 0x7fffffff; otherwise an Inf product or c gives that Inf. Returns 0 when all are finite. */
static int mma_special(const uint16_t a[REF_SMALL_K], const uint16_t b[REF_SMALL_K], float c,
                       float *d)
{
  int nan = isnan(c), pos = isinf(c) && c > 0, neg = isinf(c) && c < 0;
  for (int k = 0; k < REF_SMALL_K; k++) {
    const int ia = (a[k] & 0x7C00) == 0x7C00, ib = (b[k] & 0x7C00) == 0x7C00;
    if ((ia && (a[k] & 0x3FF)) || (ib && (b[k] & 0x3FF)) ||
        ((ia || ib) && (!(a[k] & 0x7FFF) || !(b[k] & 0x7FFF))))
      nan = 1;
    else if ((ia || ib) && ((a[k] ^ b[k]) & 0x8000))
      neg = 1;
    else if (ia || ib)
      pos = 1;
  }
  if (!nan && !pos && !neg)
    return 0;
  *d = nan || (pos && neg) ? ref_bits_f32(0x7FFFFFFFu) : pos ? INFINITY : -INFINITY;
  return 1;
}

float ref_mma_f16_f32(const uint16_t a[REF_SMALL_K], const uint16_t b[REF_SMALL_K], float c)
{
  float d;
  if (mma_special(a, b, c, &d))
    return d;
  int64_t m[REF_SMALL_K + 1];
  int e[REF_SMALL_K + 1];
  int emax = INT_MIN;
  for (int k = 0; k < REF_SMALL_K; k++) {
    int64_t ma, mb;
    int ea, eb;
    half_parts(a[k], &ma, &ea);
    half_parts(b[k], &mb, &eb);
    m[k] = ma * mb; /* exact: 22 bits */
    e[k] = ea + eb;
    if (m[k] && e[k] + 20 > emax) /* 2^(e+20): the product's exponent, ea + eb unbiased */
      emax = e[k] + 20;
  }
  const uint32_t cu = ref_f32_bits(c);
  const int cex = (int)(cu >> 23) & 255;
  const int64_t cmag = cex ? (int64_t)(0x800000u | (cu & 0x7FFFFFu)) : (int64_t)(cu & 0x7FFFFFu);
  m[REF_SMALL_K] = (cu >> 31) ? -cmag : cmag;
  e[REF_SMALL_K] = (cex ? cex : 1) - 150;
  if (cmag && e[REF_SMALL_K] + 23 > emax) /* c's exponent (-126 when subnormal) */
    emax = e[REF_SMALL_K] + 23;
  if (emax == INT_MIN) /* every term is zero: +0, even when all of them are -0 (H200) */
    return 0.0f;
  /* every term truncated toward zero to a multiple of 2^q, then one exact sum: a term's bits sit
   * at most 5 (products) or 2 (c) places above q, so |s| < 17 * 2^29 */
  const int q = emax - REF_MMA_ALIGN_BITS;
  int64_t s = 0;
  for (int k = 0; k <= REF_SMALL_K; k++) {
    const int sh = e[k] - q;
    const uint64_t mag = m[k] < 0 ? 0 - (uint64_t)m[k] : (uint64_t)m[k];
    const int64_t t = sh >= 0 ? (int64_t)(mag << sh) : -sh >= 64 ? 0 : (int64_t)(mag >> -sh);
    s += m[k] < 0 ? -t : t;
  }
  return s ? rz_scaled(s, q) : 0.0f;
}

tbe_status ref_forward_small_model(const tbe_batch *b, const tbe_layout *l,
                                   const unsigned char *mask, float *out)
{
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t i = 0; i < l->total_B; i++) {
    int32_t t = l->bag_feature[i];
    if (!mask[t])
      continue;
    int32_t j = b->feature_table_map[t], D = b->D[j];
    int64_t E = b->E[j];
    const uint16_t *W = (const uint16_t *)b->weights + b->table_offset[j];
    int64_t start = tbe_iget(b->offsets, b->itype, i), end = tbe_iget(b->offsets, b->itype, i + 1);
    int32_t count[REF_SMALL_MAX_E] = {0};
    int64_t hist_end = end - start > REF_SMALL_HIST ? start + REF_SMALL_HIST : end;
    for (int64_t p = start; p < hist_end; p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      if (idx != -1)
        count[idx]++;
    }
    uint16_t a[REF_SMALL_MAX_E];
    for (int64_t r = 0; r < E; r++)
      a[r] = ref_float_to_half((float)count[r]); /* <= 256: exact */
    float *o = out + l->bag_out[i];
    for (int32_t d = 0; d < D; d++) {
      float c = 0.0f;
      for (int64_t r0 = 0; r0 < E; r0 += REF_SMALL_K) {
        uint16_t ak[REF_SMALL_K] = {0}, bk[REF_SMALL_K] = {0};
        for (int64_t r = r0; r < r0 + REF_SMALL_K && r < E; r++) {
          ak[r - r0] = a[r];
          bk[r - r0] = W[r * D + d];
        }
        c = ref_mma_f16_f32(ak, bk, c);
      }
      for (int64_t p = hist_end; p < end; p++) {
        int64_t idx = tbe_iget(b->indices, b->itype, p);
        if (idx != -1)
          c = c + ref_half_to_float(W[idx * D + d]);
      }
      if (b->pool == TBE_POOL_MEAN && end > start)
        c = c * (1.0f / (float)(end - start));
      o[d] = c;
    }
  }
  return tbe_ok();
}
