/* forward_order.c: the forward in another implementation's order (forward_order.h: FBGEMM's CPU TBE,
 * the Triton TBE), the model an external engine is held to bit for bit. Not forward.c's order.
 *
 * A model, not a hot path: one bag and column at a time, in the plainest loop that spells the
 * order, with OpenMP over bags (bags are independent: the bits do not depend on the threads).
 */
#include "forward_order.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bounds.h"
#include "forward.h"
#include "half.h"

static const char *const order_names[REF_ORDER_COUNT] = {"normative", "fbgemm_cpu", "triton"};

const char *ref_order_name(ref_order o) { return order_names[o]; }

int ref_order_parse(const char *name)
{
  for (int o = 0; o < REF_ORDER_COUNT; o++)
    if (!strcmp(name, order_names[o]))
      return o;
  return -1;
}

int ref_order_forward_is_normative(ref_order o, const tbe_batch *b)
{
  if (o == REF_ORDER_TRITON)
    return b->pool == TBE_POOL_NONE;
  return o == REF_ORDER_NORMATIVE || b->wdtype != TBE_FP32 || b->pool == TBE_POOL_NONE;
}

tbe_status ref_forward_order_exact(ref_order o, const tbe_batch *b, const tbe_layout *l,
                                   double *exact, double *bound)
{
  if (ref_order_forward_is_normative(o, b))
    return ref_forward_exact(b, l, exact, bound);
  if (o == REF_ORDER_FBGEMM_CPU) /* fp32 weights, an fp32 accumulator */
    return ref_forward_exact_acc(b, l, 0, 0, exact, bound);
  /* Triton: the normative accumulator, which takes its rows in fp32 groups of 4 (or two such
   * groups of 4 at a time) */
  return ref_forward_exact_acc(b, l, 1, 4, exact, bound);
}

/* FBGEMM CPU on fp32 weights: the normative order with an fp32 accumulator (forward_order.h). */
static void fbgemm_fp32_bag(const tbe_batch *b, int32_t j, int64_t start, int64_t end,
                            void *out, int64_t at)
{
  const float *W = (const float *)b->weights + b->table_offset[j];
  const float *psw = b->per_sample_weights;
  const int32_t D = b->D[j];
  for (int32_t d = 0; d < D; d++) {
    float acc = 0.0f;
    for (int64_t p = start; p < end; p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      if (idx == -1)
        continue;
      float r = W[idx * D + d];
      acc = psw ? fmaf(psw[p], r, acc) : acc + r;
    }
    if (b->pool == TBE_POOL_MEAN && end > start)
      acc = acc * (1.0f / (float)(end - start));
    if (b->out_dtype == TBE_FP32)
      ((float *)out)[at + d] = acc;
    else if (b->out_dtype == TBE_FP16)
      ((uint16_t *)out)[at + d] = ref_float_to_half(acc);
    else
      ((uint16_t *)out)[at + d] = ref_float_to_bf16(acc);
  }
}

int ref_order_counter_differs(ref_order o) { return o == REF_ORDER_FBGEMM_CPU; }

int64_t ref_bounds_order_warnings(ref_order o, const tbe_batch *b, const tbe_layout *l,
                                  const void *indices, const void *offsets)
{
  const int64_t N = b->N, nb = l->total_B;
  int64_t count = 0;
  if (o != REF_ORDER_FBGEMM_CPU) { /* the normative counter: a repair on copies */
    tbe_batch copy = *b;
    size_t isz = tbe_itype_size(b->itype);
    copy.indices = malloc(isz * (size_t)(N + 1));
    copy.offsets = malloc(isz * (size_t)(nb + 1));
    if (copy.indices && copy.offsets) {
      memcpy(copy.indices, indices, isz * (size_t)N);
      memcpy(copy.offsets, offsets, isz * (size_t)(nb + 1));
      ref_bounds_check(&copy, l, TBE_BOUNDS_WARNING, &count);
    }
    free(copy.indices);
    free(copy.offsets);
    return copy.indices && copy.offsets ? count : -1;
  }
  /* FBGEMM's: the running state is the offsets array as repaired so far */
  int64_t last = tbe_iget(offsets, b->itype, nb), prev_end = 0;
  if (last != N) {
    count++;
    last = N;
  }
  for (int64_t i = 0; i < nb; i++) {
    int64_t s = i ? prev_end : tbe_iget(offsets, b->itype, 0);
    int64_t e = i + 1 == nb ? last : tbe_iget(offsets, b->itype, i + 1);
    if (s < 0 || s > e || e > N) {
      count++;
      s = s < 0 ? 0 : s > N ? N : s;
      e = e > N ? N : e < s ? s : e;
    }
    const int64_t rows = b->E[b->feature_table_map[l->bag_feature[i]]];
    for (int64_t p = s; p < e; p++) {
      int64_t idx = tbe_iget(indices, b->itype, p);
      count += idx != -1 && (idx < 0 || idx >= rows);
    }
    prev_end = e;
  }
  return count;
}

/* Element k of the flat weight buffer, widened exactly. */
static float weight_at(const tbe_batch *b, int64_t k)
{
  switch (b->wdtype) {
  case TBE_FP16: return ref_half_to_float(((const uint16_t *)b->weights)[k]);
  case TBE_BF16: return ref_bf16_to_float(((const uint16_t *)b->weights)[k]);
  case TBE_FP32: break;
  }
  return ((const float *)b->weights)[k];
}

/* Triton: column d of position p's row as its kernel reads it (a pruned row from the element D
 * before the table: forward_order.h). */
static float triton_row(const tbe_batch *b, int32_t j, int64_t p, int32_t d)
{
  int64_t idx = tbe_iget(b->indices, b->itype, p);
  return weight_at(b, b->table_offset[j] + idx * b->D[j] + d);
}

int32_t ref_triton_block(const tbe_batch *b)
{
  int32_t widest = 1, block = 1;
  for (int32_t j = 0; j < b->num_tables; j++)
    widest = b->D[j] > widest ? b->D[j] : widest;
  while (block < widest)
    block *= 2;
  return block;
}

/* Triton: one group of 4 positions from p of column d, in fp32 (forward_order.h). */
static float triton_group(const tbe_batch *b, int32_t j, int64_t p, int32_t d, int32_t block)
{
  float r[4];
  for (int k = 0; k < 4; k++)
    r[k] = triton_row(b, j, p + k, d);
  const float *w = b->per_sample_weights;
  if (!w)
    return ((r[0] + r[1]) + r[2]) + r[3];
  /* which product is rounded, as measured: by 32-column slot from BLOCK_SIZE 128 (64 for fp32
   * weights) up, else the second everywhere */
  const int slots = block >= 128 || (block == 64 && b->wdtype == TBE_FP32);
  const int a = slots ? (d / 32) % 2 : 1;
  float s = r[a] * w[p + a];
  s = fmaf(r[1 - a], w[p + 1 - a], s);
  s = fmaf(r[2], w[p + 2], s);
  return fmaf(r[3], w[p + 3], s);
}

/* Triton: one bag of table j into out[at..], its step 4 or 8 rows (forward_order.h). */
static void triton_bag(const tbe_batch *b, int32_t j, int64_t start, int64_t end, int step,
                       int32_t block, void *out, int64_t at)
{
  const float *w = b->per_sample_weights;
  const int fp64_acc = b->wdtype == TBE_FP32;
  for (int32_t d = 0; d < b->D[j]; d++) {
    double acc64 = 0.0;
    float acc32 = 0.0f;
    int64_t p = start;
    for (; p + step <= end; p += step)
      for (int g = 0; g < step; g += 4) {
        float s = triton_group(b, j, p + g, d, block);
        if (fp64_acc)
          acc64 = acc64 + (double)s;
        else
          acc32 = acc32 + s;
      }
    for (; p < end; p++) {
      float r = triton_row(b, j, p, d);
      if (fp64_acc)
        acc64 = acc64 + (double)(w ? r * w[p] : r);
      else
        acc32 = w ? fmaf(r, w[p], acc32) : acc32 + r;
    }
    float v = fp64_acc ? (float)acc64 : acc32;
    if (b->out_dtype == TBE_FP32)
      ((float *)out)[at + d] = v;
    else if (b->out_dtype == TBE_FP16)
      ((uint16_t *)out)[at + d] = ref_float_to_half(v);
    else
      ((uint16_t *)out)[at + d] = ref_float_to_bf16(v);
  }
}

/* Triton's forward: refuses what it has no kernel for (MEAN) or reads from outside the weights
 * (a pruned row of table 0). */
static tbe_status triton_forward(const tbe_batch *b, const tbe_layout *l, void *out)
{
  if (b->pool == TBE_POOL_MEAN)
    return tbe_error(TBE_EINVAL, "pool", -1, "the Triton TBE has no MEAN pooling");
  for (int64_t i = 0; i < l->total_B; i++) {
    const int32_t j = b->feature_table_map[l->bag_feature[i]];
    for (int64_t p = tbe_iget(b->offsets, b->itype, i); p < tbe_iget(b->offsets, b->itype, i + 1);
         p++)
      if (tbe_iget(b->indices, b->itype, p) == -1 && b->table_offset[j] < b->D[j])
        return tbe_error(TBE_EINVAL, "indices", p,
                         "a pruned row of the first table: the Triton TBE reads it from before "
                         "the weights, which no model can know");
  }
  /* the wide step: unweighted, fixed batch, B >= 65536, 16-bit weights (triton_tbe.md 2.1) */
  const int step = !b->per_sample_weights && b->R == 0 && b->B >= 65536 &&
                           b->wdtype != TBE_FP32 ? 8 : 4;
  const int32_t block = ref_triton_block(b);
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t i = 0; i < l->total_B; i++)
    triton_bag(b, b->feature_table_map[l->bag_feature[i]], tbe_iget(b->offsets, b->itype, i),
               tbe_iget(b->offsets, b->itype, i + 1), step, block, out, l->bag_out[i]);
  return tbe_ok();
}

tbe_status ref_forward_order(ref_order o, const tbe_batch *b, const tbe_layout *l, void *out)
{
  if (ref_order_forward_is_normative(o, b))
    return ref_forward(b, l, out);
  if (o == REF_ORDER_TRITON)
    return triton_forward(b, l, out);
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t i = 0; i < l->total_B; i++)
    fbgemm_fp32_bag(b, b->feature_table_map[l->bag_feature[i]], tbe_iget(b->offsets, b->itype, i),
                    tbe_iget(b->offsets, b->itype, i + 1), out, l->bag_out[i]);
  return tbe_ok();
}
