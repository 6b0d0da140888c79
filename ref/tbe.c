/* tbe.c: status helpers, names, and the structural validation and layout of a tbe_batch.
 * Not the bounds check (bounds.c), which looks at index and offset values.
 */
#include "tbe.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tbe_status tbe_ok(void)
{
  tbe_status s;
  memset(&s, 0, sizeof s);
  s.position = s.feature = s.bag = s.value = -1;
  return s;
}

tbe_status tbe_error(tbe_code code, const char *field, int64_t position, const char *fmt, ...)
{
  tbe_status s = tbe_ok();
  s.code = code;
  snprintf(s.field, sizeof s.field, "%s", field ? field : "");
  s.position = position;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s.message, sizeof s.message, fmt, ap);
  va_end(ap);
  return s;
}

const char *tbe_code_name(tbe_code c)
{
  switch (c) {
  case TBE_OK: return "ok";
  case TBE_EINVAL: return "invalid input";
  case TBE_EBOUNDS: return "bounds check failed";
  case TBE_ENOMEM: return "out of memory";
  case TBE_EIO: return "I/O error";
  case TBE_ENODEV: return "no GPU";
  case TBE_EINTERNAL: return "internal error";
  }
  return "unknown";
}

const char *tbe_dtype_name(tbe_dtype t)
{
  return t == TBE_FP32 ? "fp32" : t == TBE_FP16 ? "fp16" : "bf16";
}
const char *tbe_itype_name(tbe_itype t) { return t == TBE_I32 ? "int32" : "int64"; }
const char *tbe_pool_name(tbe_pool p)
{
  return p == TBE_POOL_SUM ? "sum" : p == TBE_POOL_MEAN ? "mean" : "none";
}
const char *tbe_bounds_name(tbe_bounds_mode m)
{
  static const char *n[] = {"fatal", "warning", "ignore", "none"};
  return n[m];
}
size_t tbe_dtype_size(tbe_dtype t) { return t == TBE_FP32 ? 4 : 2; }
size_t tbe_itype_size(tbe_itype t) { return t == TBE_I32 ? 4 : 8; }

size_t tbe_mul_size(size_t a, size_t b)
{
  if (a != 0 && b > SIZE_MAX / a)
    return SIZE_MAX;
  return a * b;
}

int64_t tbe_total_B(const tbe_batch *b)
{
  if (b->R == 0)
    return (int64_t)b->T * b->B;
  int64_t n = 0;
  for (int64_t i = 0; i < (int64_t)b->T * b->R; i++)
    n += b->B_vbe[i];
  return n;
}

/* Sizes are bounded so every product below stays far from int64 overflow: 2^40 rows per table,
 * 2^40 indices, 2^31 - 2 bags; the output is checked separately. */
#define MAX_ROWS (INT64_C(1) << 40)
#define MAX_N (INT64_C(1) << 40)
#define MAX_BAGS ((INT64_C(1) << 31) - 2) /* total_B + 1 fits a CUB item count (int) */
#define MAX_ELEMS (INT64_C(1) << 46)

tbe_status tbe_batch_validate(const tbe_batch *b)
{
  if (b->num_tables < 1)
    return tbe_error(TBE_EINVAL, "num_tables", -1, "need at least one table, got %d", b->num_tables);
  if (!b->E || !b->D || !b->table_offset)
    return tbe_error(TBE_EINVAL, "tables", -1, "E, D and table_offset must be given");
  if (b->wdtype > TBE_BF16 || b->out_dtype > TBE_BF16)
    return tbe_error(TBE_EINVAL, "dtype", -1, "unknown weight or output dtype");
  if (b->itype > TBE_I64)
    return tbe_error(TBE_EINVAL, "itype", -1, "unknown index dtype");
  if (b->pool > TBE_POOL_NONE)
    return tbe_error(TBE_EINVAL, "pool", -1, "unknown pooling mode");
  if (b->table_offset[0] != 0)
    return tbe_error(TBE_EINVAL, "table_offset", 0, "must start at 0, got %lld",
                     (long long)b->table_offset[0]);
  for (int32_t j = 0; j < b->num_tables; j++) {
    if (b->D[j] < 1 || b->D[j] > TBE_MAX_D)
      return tbe_error(TBE_EINVAL, "D", j, "D of table %d is %d, outside 1..%d", j, b->D[j],
                       TBE_MAX_D);
    if (b->E[j] < 1 || b->E[j] > MAX_ROWS) /* E = 0: a repair to row 0 would read nothing */
      return tbe_error(TBE_EINVAL, "E", j, "E of table %d is %lld, outside 1..2^40", j,
                       (long long)b->E[j]);
    if (b->itype == TBE_I32 && b->E[j] > INT32_MAX)
      return tbe_error(TBE_EINVAL, "E", j,
                       "table %d has %lld rows, more than int32 indices can address", j,
                       (long long)b->E[j]);
    int64_t want = b->table_offset[j] + b->E[j] * b->D[j];
    if (b->table_offset[j + 1] != want)
      return tbe_error(TBE_EINVAL, "table_offset", j + 1,
                       "table_offset[%d] is %lld, expected %lld (table_offset[%d] + E*D)", j + 1,
                       (long long)b->table_offset[j + 1], (long long)want, j);
    if (want > MAX_ELEMS)
      return tbe_error(TBE_ENOMEM, "weights", j, "tables hold %lld elements, more than 2^46",
                       (long long)want);
  }
  if (tbe_mul_size((size_t)b->table_offset[b->num_tables], tbe_dtype_size(b->wdtype)) == SIZE_MAX)
    return tbe_error(TBE_ENOMEM, "weights", -1, "weights do not fit in memory");
  if (b->T < 1)
    return tbe_error(TBE_EINVAL, "T", -1, "need at least one feature, got %d", b->T);
  if (!b->feature_table_map)
    return tbe_error(TBE_EINVAL, "feature_table_map", -1, "must be given");
  for (int32_t t = 0; t < b->T; t++)
    if (b->feature_table_map[t] < 0 || b->feature_table_map[t] >= b->num_tables)
      return tbe_error(TBE_EINVAL, "feature_table_map", t,
                       "feature %d maps to table %d, outside 0..%d", t, b->feature_table_map[t],
                       b->num_tables - 1);
  if (b->R < 0)
    return tbe_error(TBE_EINVAL, "R", -1, "R is %d, must be >= 0", b->R);
  if (b->R == 0) {
    if (b->B < 0)
      return tbe_error(TBE_EINVAL, "B", -1, "B is %d, must be >= 0", b->B);
  } else {
    if (!b->B_vbe)
      return tbe_error(TBE_EINVAL, "B_vbe", -1, "VBE with R=%d needs B_vbe", b->R);
    for (int64_t i = 0; i < (int64_t)b->T * b->R; i++)
      if (b->B_vbe[i] < 0)
        return tbe_error(TBE_EINVAL, "B_vbe", i, "B[%lld][%lld] is %d, must be >= 0",
                         (long long)(i / b->R), (long long)(i % b->R), b->B_vbe[i]);
  }
  int64_t total_B = tbe_total_B(b);
  if (total_B > MAX_BAGS)
    return tbe_error(TBE_ENOMEM, "B", -1, "%lld bags, more than 2^31 - 2", (long long)total_B);
  if (b->N < 0 || b->N > MAX_N)
    return tbe_error(TBE_EINVAL, "indices", -1, "N is %lld, outside 0..2^40", (long long)b->N);
  if (b->itype == TBE_I32 && (b->N > INT32_MAX || total_B + 1 > INT32_MAX))
    return tbe_error(TBE_EINVAL, "indices", -1,
                     "%lld indices do not fit int32 positions; use int64 indices",
                     (long long)b->N);
  if ((b->N > 0 && !b->indices) || !b->offsets)
    return tbe_error(TBE_EINVAL, b->offsets ? "indices" : "offsets", -1, "must be given");
  if (b->pool == TBE_POOL_MEAN && b->per_sample_weights)
    return tbe_error(TBE_EINVAL, "per_sample_weights", -1,
                     "MEAN pooling with per-sample weights is rejected (ref/SEMANTICS.md 3)");
  if (b->pool == TBE_POOL_NONE) {
    if (b->R)
      return tbe_error(TBE_EINVAL, "pool", -1, "pooling NONE does not support VBE");
    if (b->per_sample_weights)
      return tbe_error(TBE_EINVAL, "per_sample_weights", -1,
                       "pooling NONE does not take per-sample weights");
    int32_t d0 = b->D[b->feature_table_map[0]];
    for (int32_t t = 1; t < b->T; t++)
      if (b->D[b->feature_table_map[t]] != d0)
        return tbe_error(TBE_EINVAL, "D", b->feature_table_map[t],
                         "pooling NONE needs one D for all features: feature 0 has %d, "
                         "feature %d has %d", d0, t, b->D[b->feature_table_map[t]]);
  }
  int64_t total_D = 0;
  for (int32_t t = 0; t < b->T; t++)
    total_D += b->D[b->feature_table_map[t]];
  int64_t out = b->pool == TBE_POOL_NONE ? b->N * total_D / b->T : 0;
  if (b->pool != TBE_POOL_NONE) {
    if (b->R == 0)
      out = (int64_t)b->B * total_D;
    else
      for (int64_t i = 0; i < (int64_t)b->T * b->R; i++)
        out += (int64_t)b->B_vbe[i] * b->D[b->feature_table_map[i / b->R]];
  }
  if (out > MAX_ELEMS ||
      tbe_mul_size((size_t)out, tbe_dtype_size(b->out_dtype)) == SIZE_MAX)
    return tbe_error(TBE_ENOMEM, "output", -1, "output of %lld elements does not fit in memory",
                     (long long)out);
  return tbe_ok();
}

tbe_status tbe_layout_init(tbe_layout *l, const tbe_batch *b)
{
  memset(l, 0, sizeof *l);
  int32_t T = b->T, R = b->R;
  l->total_B = tbe_total_B(b);
  l->B_offsets = malloc(sizeof(int64_t) * (size_t)(T + 1));
  l->D_offsets = malloc(sizeof(int64_t) * (size_t)(T + 1));
  l->bag_feature = malloc(sizeof(int32_t) * (size_t)(l->total_B + 1));
  if (b->pool != TBE_POOL_NONE)
    l->bag_out = malloc(sizeof(int64_t) * (size_t)(l->total_B + 1));
  if (!l->B_offsets || !l->D_offsets || !l->bag_feature ||
      (b->pool != TBE_POOL_NONE && !l->bag_out)) {
    tbe_layout_free(l);
    return tbe_error(TBE_ENOMEM, "layout", -1, "cannot allocate the layout of %lld bags",
                     (long long)l->total_B);
  }
  l->B_offsets[0] = 0;
  l->D_offsets[0] = 0;
  for (int32_t t = 0; t < T; t++) {
    int32_t D = b->D[b->feature_table_map[t]];
    int64_t Bt = b->B;
    if (R) {
      Bt = 0;
      for (int32_t r = 0; r < R; r++)
        Bt += b->B_vbe[t * R + r];
    }
    l->B_offsets[t + 1] = l->B_offsets[t] + Bt;
    l->D_offsets[t + 1] = l->D_offsets[t] + D;
    if (D > l->max_D)
      l->max_D = D;
    for (int64_t i = l->B_offsets[t]; i < l->B_offsets[t + 1]; i++)
      l->bag_feature[i] = t;
  }
  l->total_D = l->D_offsets[T];
  if (b->pool == TBE_POOL_NONE) {
    l->out_elems = b->N * l->max_D;
    return tbe_ok();
  }
  if (R == 0) {
    for (int32_t t = 0; t < T; t++)
      for (int64_t i = 0; i < b->B; i++)
        l->bag_out[(int64_t)t * b->B + i] = i * l->total_D + l->D_offsets[t];
    l->out_elems = (int64_t)b->B * l->total_D;
    return tbe_ok();
  }
  /* VBE: blocks ordered rank, then feature; bags within a feature ordered rank, then sample */
  int64_t pos = 0;
  for (int32_t r = 0; r < R; r++)
    for (int32_t t = 0; t < T; t++) {
      int64_t D = l->D_offsets[t + 1] - l->D_offsets[t];
      int64_t first = l->B_offsets[t];
      for (int32_t rr = 0; rr < r; rr++)
        first += b->B_vbe[t * R + rr];
      for (int64_t i = 0; i < b->B_vbe[t * R + r]; i++, pos += D)
#if defined(TBE_FAULT_VBE_RANK1_SHIFT) /* planted: rank 1's bags one row early */
        l->bag_out[first + i] = r == 1 && pos >= D ? pos - D : pos;
#else
        l->bag_out[first + i] = pos;
#endif
    }
  l->out_elems = pos;
  return tbe_ok();
}

void tbe_layout_free(tbe_layout *l)
{
  free(l->B_offsets);
  free(l->D_offsets);
  free(l->bag_out);
  free(l->bag_feature);
  memset(l, 0, sizeof *l);
}

void tbe_batch_free(tbe_batch *b)
{
  free(b->E);
  free(b->D);
  free(b->weights);
  free(b->table_offset);
  free(b->feature_table_map);
  free(b->B_vbe);
  free(b->indices);
  free(b->offsets);
  free(b->per_sample_weights);
  memset(b, 0, sizeof *b);
}
