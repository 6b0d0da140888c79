/* forward_order.c: the forward in another implementation's order (order.h), the model an
 * external engine's forward is held to bit for bit. Not the normative forward (forward.c).
 *
 * A model, not a hot path: one bag and column at a time, in the plainest loop that spells the
 * order, with OpenMP over bags (bags are independent: the bits do not depend on the threads).
 */
#include "order.h"

#include <math.h>
#include <string.h>

#include "forward.h"
#include "half.h"

static const char *const order_names[REF_ORDER_COUNT] = {"normative", "fbgemm_cpu"};

const char *ref_order_name(ref_order o) { return order_names[o]; }

int ref_order_parse(const char *name)
{
  for (int o = 0; o < REF_ORDER_COUNT; o++)
    if (!strcmp(name, order_names[o]))
      return o;
  return -1;
}

int ref_order_forward_fp32(ref_order o, const tbe_batch *b)
{
  return o == REF_ORDER_FBGEMM_CPU && b->wdtype == TBE_FP32 && b->pool != TBE_POOL_NONE;
}

int ref_order_forward_is_normative(ref_order o, const tbe_batch *b)
{
  return o == REF_ORDER_NORMATIVE || !ref_order_forward_fp32(o, b);
}

/* FBGEMM CPU on fp32 weights: the normative order with an fp32 accumulator (order.h). */
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

tbe_status ref_forward_order(ref_order o, const tbe_batch *b, const tbe_layout *l, void *out)
{
  if (ref_order_forward_is_normative(o, b))
    return ref_forward(b, l, out);
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t i = 0; i < l->total_B; i++)
    fbgemm_fp32_bag(b, b->feature_table_map[l->bag_feature[i]], tbe_iget(b->offsets, b->itype, i),
                    tbe_iget(b->offsets, b->itype, i + 1), out, l->bag_out[i]);
  return tbe_ok();
}
