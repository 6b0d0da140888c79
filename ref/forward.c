/* forward.c: the TBE forward of TBE_SEMANTICS.md section 3 on the CPU (SUM, MEAN, NONE;
 * weighted; VBE through the layout) and its exact twin with per-element error bounds.
 * Not the GPU kernels (gpu/forward_*.cu): those must equal ref_forward bit for bit.
 *
 * Accumulation order (normative): for each bag and column, the accumulator starts at +0 and takes
 * the bag's positions in increasing p, one at a time, skipping -1: acc = acc + r_p, or
 * acc = fma(w_p, r_p, acc) when weighted. The accumulator is fp64 for FP32 weights and fp32 for
 * FP16/BF16 weights (rows widen exactly). MEAN then multiplies by 1/L computed in the
 * accumulator's precision (L counts -1 positions; L = 0 leaves zeros). The store rounds once to
 * the output dtype. Bags are independent, so OpenMP over bags gives the same bits for any thread
 * count.
 */
#include "forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "half.h"

/* Stores an fp64 or fp32 accumulator value into element i of out, one rounding. */
static void store_double(void *out, tbe_dtype t, int64_t i, double v)
{
  if (t == TBE_FP32)
    ((float *)out)[i] = (float)v;
  else if (t == TBE_FP16)
    ((uint16_t *)out)[i] = ref_double_to_half(v);
  else
    ((uint16_t *)out)[i] = ref_double_to_bf16(v);
}

static void store_float(void *out, tbe_dtype t, int64_t i, float v)
{
  if (t == TBE_FP32)
    ((float *)out)[i] = v;
  else if (t == TBE_FP16)
    ((uint16_t *)out)[i] = ref_float_to_half(v);
  else
    ((uint16_t *)out)[i] = ref_float_to_bf16(v);
}

/* Row `row` of a 16-bit table widened to fp32 into r[0..D). */
static void widen_row16(const uint16_t *row, tbe_dtype t, int32_t D, float *r)
{
  if (t == TBE_FP16)
    for (int32_t d = 0; d < D; d++)
      r[d] = ref_half_to_float(row[d]);
  else
    for (int32_t d = 0; d < D; d++)
      r[d] = ref_bf16_to_float(row[d]);
}

/* One pooled bag with FP32 weights: fp64 accumulator. */
static void bag_fp32(const tbe_batch *b, int64_t start, int64_t end, const float *table,
                     int32_t D, double *acc)
{
  for (int32_t d = 0; d < D; d++)
    acc[d] = 0.0;
  for (int64_t p = start; p < end; p++) {
    int64_t idx = tbe_iget(b->indices, b->itype, p);
    if (idx == -1)
      continue;
    const float *r = table + idx * D;
    if (b->per_sample_weights) {
      double w = b->per_sample_weights[p];
      for (int32_t d = 0; d < D; d++)
        acc[d] = fma(w, (double)r[d], acc[d]);
    } else {
      for (int32_t d = 0; d < D; d++)
        acc[d] = acc[d] + (double)r[d];
    }
  }
  if (b->pool == TBE_POOL_MEAN && end > start) {
    double s = 1.0 / (double)(end - start);
    for (int32_t d = 0; d < D; d++)
      acc[d] = acc[d] * s;
  }
}

/* One pooled bag with FP16/BF16 weights: fp32 accumulator; r is scratch for one row. */
static void bag_fp16(const tbe_batch *b, int64_t start, int64_t end, const uint16_t *table,
                     int32_t D, float *acc, float *r)
{
  for (int32_t d = 0; d < D; d++)
    acc[d] = 0.0f;
  for (int64_t p = start; p < end; p++) {
    int64_t idx = tbe_iget(b->indices, b->itype, p);
    if (idx == -1)
      continue;
    widen_row16(table + idx * D, b->wdtype, D, r);
    if (b->per_sample_weights) {
      float w = b->per_sample_weights[p];
      for (int32_t d = 0; d < D; d++)
        acc[d] = fmaf(w, r[d], acc[d]);
    } else {
      for (int32_t d = 0; d < D; d++)
        acc[d] = acc[d] + r[d];
    }
  }
  if (b->pool == TBE_POOL_MEAN && end > start) {
    float s = 1.0f / (float)(end - start);
    for (int32_t d = 0; d < D; d++)
      acc[d] = acc[d] * s;
  }
}

/* Per-thread scratch: each thread gets `per_thread` doubles at scratch + thread * per_thread. */
static double *scratch_alloc(int32_t max_D, int *threads)
{
  *threads = omp_get_max_threads();
  return malloc(sizeof(double) * 2 * (size_t)max_D * (size_t)*threads);
}

/* Pooling NONE: output row p is row indices[p] converted (zeros for -1 and for positions that
 * no bag covers). */
static void forward_none(const tbe_batch *b, const tbe_layout *l, void *out, double *scratch,
                         int threads)
{
  memset(out, 0, (size_t)l->out_elems * tbe_dtype_size(b->out_dtype));
#pragma omp parallel num_threads(threads)
  {
    float *row = (float *)(scratch + 2 * (size_t)l->max_D * (size_t)omp_get_thread_num());
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < l->total_B; i++) {
      int32_t j = b->feature_table_map[l->bag_feature[i]];
      int32_t D = b->D[j];
      int64_t start = tbe_iget(b->offsets, b->itype, i);
      int64_t end = tbe_iget(b->offsets, b->itype, i + 1);
      for (int64_t p = start; p < end; p++) {
        int64_t idx = tbe_iget(b->indices, b->itype, p);
        if (idx == -1)
          continue;
        int64_t src = b->table_offset[j] + idx * D;
        if (b->wdtype == TBE_FP32)
          memcpy(row, (const float *)b->weights + src, sizeof(float) * (size_t)D);
        else
          widen_row16((const uint16_t *)b->weights + src, b->wdtype, D, row);
        for (int32_t d = 0; d < D; d++)
          store_float(out, b->out_dtype, p * D + d, row[d]);
      }
    }
  }
}

tbe_status ref_forward(const tbe_batch *b, const tbe_layout *l, void *out)
{
  int threads;
  double *scratch = scratch_alloc(l->max_D, &threads);
  if (!scratch)
    return tbe_error(TBE_ENOMEM, "scratch", -1, "cannot allocate forward scratch");
  if (b->pool == TBE_POOL_NONE) {
    forward_none(b, l, out, scratch, threads);
    free(scratch);
    return tbe_ok();
  }
#pragma omp parallel num_threads(threads)
  {
    double *mine = scratch + 2 * (size_t)l->max_D * (size_t)omp_get_thread_num();
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < l->total_B; i++) {
      int32_t j = b->feature_table_map[l->bag_feature[i]];
      int32_t D = b->D[j];
      int64_t start = tbe_iget(b->offsets, b->itype, i);
      int64_t end = tbe_iget(b->offsets, b->itype, i + 1);
      int64_t o = l->bag_out[i];
      if (b->wdtype == TBE_FP32) {
        bag_fp32(b, start, end, (const float *)b->weights + b->table_offset[j], D, mine);
        for (int32_t d = 0; d < D; d++)
          store_double(out, b->out_dtype, o + d, mine[d]);
      } else {
        float *acc = (float *)mine, *r = acc + l->max_D;
        bag_fp16(b, start, end, (const uint16_t *)b->weights + b->table_offset[j], D, acc, r);
        for (int32_t d = 0; d < D; d++)
          store_float(out, b->out_dtype, o + d, acc[d]);
      }
    }
  }
  free(scratch);
  return tbe_ok();
}
