/* test_batch.h: builds small tbe_batch values by hand for the ref/ unit tests (weights given
 * by a formula or filled after). Not the case generator (harness/), which tests here must not use.
 */
#ifndef REF_TEST_BATCH_H
#define REF_TEST_BATCH_H

#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "tbe.h"

/* Shape of a hand-built batch; arrays are copied. Weight element (j, row, d) is set to
 * weight_fn(j, row, d) rounded to wdtype, or 0 when weight_fn is NULL. */
typedef struct {
  int32_t num_tables;
  const int64_t *E;
  const int32_t *D;
  tbe_dtype wdtype;
  int32_t T;
  const int32_t *map;       /* NULL: identity */
  int32_t B, R;
  const int32_t *B_vbe;
  tbe_itype itype;
  int64_t N;
  const int64_t *indices;
  const int64_t *offsets;   /* total_B + 1 */
  const float *psw;         /* NULL: unweighted */
  tbe_pool pool;
  tbe_dtype out_dtype;
  double (*weight_fn)(int32_t j, int64_t row, int32_t d);
} tb_spec;

static void *tb_copy(const void *src, size_t bytes)
{
  void *p = malloc(bytes ? bytes : 1);
  if (src && bytes)
    memcpy(p, src, bytes);
  return p;
}

static void tb_set_weight(tbe_batch *b, int64_t e, double v)
{
  if (b->wdtype == TBE_FP32)
    ((float *)b->weights)[e] = (float)v;
  else if (b->wdtype == TBE_FP16)
    ((uint16_t *)b->weights)[e] = ref_double_to_half(v);
  else
    ((uint16_t *)b->weights)[e] = ref_double_to_bf16(v);
}

static tbe_batch tb_build(const tb_spec *s)
{
  tbe_batch b;
  memset(&b, 0, sizeof b);
  b.num_tables = s->num_tables;
  b.E = tb_copy(s->E, sizeof(int64_t) * (size_t)s->num_tables);
  b.D = tb_copy(s->D, sizeof(int32_t) * (size_t)s->num_tables);
  b.wdtype = s->wdtype;
  b.table_offset = malloc(sizeof(int64_t) * (size_t)(s->num_tables + 1));
  b.table_offset[0] = 0;
  for (int32_t j = 0; j < s->num_tables; j++)
    b.table_offset[j + 1] = b.table_offset[j] + s->E[j] * s->D[j];
  b.weights = malloc(tbe_dtype_size(s->wdtype) * (size_t)(b.table_offset[s->num_tables] + 1));
  for (int32_t j = 0; j < s->num_tables; j++)
    for (int64_t r = 0; r < s->E[j]; r++)
      for (int32_t d = 0; d < s->D[j]; d++)
        tb_set_weight(&b, b.table_offset[j] + r * s->D[j] + d,
                      s->weight_fn ? s->weight_fn(j, r, d) : 0.0);
  b.T = s->T;
  b.feature_table_map = malloc(sizeof(int32_t) * (size_t)s->T);
  for (int32_t t = 0; t < s->T; t++)
    b.feature_table_map[t] = s->map ? s->map[t] : t;
  b.B = s->B;
  b.R = s->R;
  if (s->R)
    b.B_vbe = tb_copy(s->B_vbe, sizeof(int32_t) * (size_t)(s->T * s->R));
  b.itype = s->itype;
  b.N = s->N;
  int64_t total_B = tbe_total_B(&b);
  b.indices = malloc(tbe_itype_size(s->itype) * (size_t)(s->N + 1));
  b.offsets = malloc(tbe_itype_size(s->itype) * (size_t)(total_B + 1));
  for (int64_t p = 0; p < s->N; p++)
    tbe_iset(b.indices, b.itype, p, s->indices[p]);
  for (int64_t i = 0; i <= total_B; i++)
    tbe_iset(b.offsets, b.itype, i, s->offsets[i]);
  if (s->psw)
    b.per_sample_weights = tb_copy(s->psw, sizeof(float) * (size_t)s->N);
  b.pool = s->pool;
  b.out_dtype = s->out_dtype;
  return b;
}

#endif
