/* import.c: a tbe_batch from a directory of .npy files (see import.h for the files).
 * Not a validator of values: indices and offsets arrive unchecked, as captured; the bounds
 * check of each engine deals with them, exactly as with a generated case.
 */
#include "import.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bounds.h"
#include "engine.h"
#include "npy.h"

#define IMPORT_MAX_ROWS (INT64_C(1) << 40)  /* tbe_batch_validate's limits */
#define IMPORT_MAX_ELEMS (INT64_C(1) << 46)

/* Reads dir/name.npy into a. *present = 0 (and ok) when the file is absent and optional. */
static tbe_status import_read(const char *dir, const char *name, int required, npy_array *a,
                              int *present, uint64_t *digest)
{
  char path[4200];
  memset(a, 0, sizeof *a);
  *present = 0;
  if (snprintf(path, sizeof path, "%s/%s.npy", dir, name) >= (int)sizeof path)
    return tbe_error(TBE_EINVAL, name, -1, "path %s/%s.npy is too long", dir, name);
  struct stat st;
  if (stat(path, &st) != 0 && errno == ENOENT) {
    if (required)
      return tbe_error(TBE_EINVAL, name, -1, "%s is missing (a captured batch needs it)", path);
    return tbe_ok();
  }
  tbe_status s = npy_read(path, a);
  if (s.code != TBE_OK)
    return s;
  /* every array but B_vbe ([T, R]) is one-dimensional: flat weights, one E and D per table */
  if (a->ndim != 1 && strcmp(name, "B_vbe")) {
    s = tbe_error(TBE_EINVAL, name, -1, "%s is shaped (%lld, %lld); it must be one-dimensional",
                  path, (long long)a->shape[0], (long long)a->shape[1]);
    npy_free(a);
    return s;
  }
  *present = 1;
  *digest = eng_fnv1a(*digest, name, strlen(name) + 1);
  *digest = eng_fnv1a(*digest, a->shape, sizeof a->shape);
  *digest = eng_fnv1a(*digest, a->data, (size_t)a->count * npy_dtype_size(a->dtype));
  return tbe_ok();
}

/* Converts an integer array (i4 or i8) of count elements into a malloc'd int64 array. */
static tbe_status import_ints(const char *name, const npy_array *a, int64_t count, int64_t lo,
                              int64_t hi, int64_t **out)
{
  *out = NULL;
  if (a->dtype != NPY_I4 && a->dtype != NPY_I8)
    return tbe_error(TBE_EINVAL, name, -1, "%s.npy must hold '<i4' or '<i8', not '%s'", name,
                     npy_dtype_descr(a->dtype));
  if (a->count != count)
    return tbe_error(TBE_EINVAL, name, -1, "%s.npy holds %lld values, expected %lld", name,
                     (long long)a->count, (long long)count);
  int64_t *v = malloc(sizeof *v * (size_t)count + 1);
  if (!v)
    return tbe_error(TBE_ENOMEM, name, -1, "out of memory");
  for (int64_t i = 0; i < count; i++) {
    v[i] = a->dtype == NPY_I4 ? ((const int32_t *)a->data)[i] : ((const int64_t *)a->data)[i];
    if (v[i] < lo || v[i] > hi) {
      tbe_status s = tbe_error(TBE_EINVAL, name, i, "%s[%lld] is %lld, outside %lld..%lld",
                               name, (long long)i, (long long)v[i], (long long)lo, (long long)hi);
      free(v);
      return s;
    }
  }
  *out = v;
  return tbe_ok();
}

/* Narrows a checked int64 array to a malloc'd int32 one. */
static tbe_status import_narrow(const char *name, const int64_t *v, int64_t count, int32_t **out)
{
  *out = malloc(sizeof **out * (size_t)count + 1);
  if (!*out)
    return tbe_error(TBE_ENOMEM, name, -1, "out of memory");
  for (int64_t i = 0; i < count; i++)
    (*out)[i] = (int32_t)v[i];
  return tbe_ok();
}

/* Moves the data of a out of it (a keeps no data). */
static void *import_take(npy_array *a)
{
  void *p = a->data;
  a->data = NULL;
  return p;
}

enum { F_WEIGHTS, F_E, F_D, F_TOFF, F_MAP, F_BVBE, F_IDX, F_OFF, F_PSW, F_COUNT };
static const char *const import_files[F_COUNT] = {
  "weights", "E", "D", "table_offset", "feature_table_map", "B_vbe", "indices", "offsets",
  "per_sample_weights"};
static const int import_required[F_COUNT] = {1, 1, 1, 0, 0, 0, 1, 1, 0};

/* Builds the batch from the arrays read (a[i] present when has[i]). */
static tbe_status import_build(npy_array *a, const int *has, tbe_batch *b)
{
  int64_t *tmp = NULL;
  const int64_t nt = a[F_E].count;
  if (nt < 1 || nt > INT32_MAX)
    return tbe_error(TBE_EINVAL, "E", -1, "E.npy holds %lld tables", (long long)nt);
  b->num_tables = (int32_t)nt;
  tbe_status s = import_ints("E", &a[F_E], nt, 1, IMPORT_MAX_ROWS, &b->E);
  if (s.code == TBE_OK)
    s = import_ints("D", &a[F_D], nt, 1, TBE_MAX_D, &tmp);
  if (s.code == TBE_OK)
    s = import_narrow("D", tmp, nt, &b->D);
  free(tmp);
  tmp = NULL;
  if (s.code == TBE_OK && has[F_TOFF])
    s = import_ints("table_offset", &a[F_TOFF], nt + 1, 0, INT64_MAX, &b->table_offset);
  if (s.code == TBE_OK && !has[F_TOFF]) {
    if (!(b->table_offset = malloc(sizeof(int64_t) * (size_t)(nt + 1))))
      return tbe_error(TBE_ENOMEM, "table_offset", -1, "out of memory");
    b->table_offset[0] = 0;
    for (int64_t j = 0; j < nt; j++) { /* E*D <= 2^51 and the sum stays below 2^52 */
      if (b->table_offset[j] > IMPORT_MAX_ELEMS)
        return tbe_error(TBE_EINVAL, "E", j, "the tables hold more than 2^46 elements");
      b->table_offset[j + 1] = b->table_offset[j] + b->E[j] * b->D[j];
    }
  }
  if (s.code != TBE_OK)
    return s;

  const npy_array *w = &a[F_WEIGHTS];
  if (w->dtype != NPY_F4 && w->dtype != NPY_F2 && w->dtype != NPY_U2)
    return tbe_error(TBE_EINVAL, "weights", -1,
                     "weights.npy must hold '<f4', '<f2' or '<u2' (bf16 bits), not '%s'",
                     npy_dtype_descr(w->dtype));
  if (w->count != b->table_offset[nt])
    return tbe_error(TBE_EINVAL, "weights", -1,
                     "weights.npy holds %lld values; the tables need %lld", (long long)w->count,
                     (long long)b->table_offset[nt]);
  b->wdtype = w->dtype == NPY_F4 ? TBE_FP32 : w->dtype == NPY_F2 ? TBE_FP16 : TBE_BF16;
  b->weights = import_take(&a[F_WEIGHTS]);

  int64_t T = has[F_MAP] ? a[F_MAP].count : nt;
  if (T < 1 || T > INT32_MAX)
    return tbe_error(TBE_EINVAL, "feature_table_map", -1, "%lld features", (long long)T);
  b->T = (int32_t)T;
  if (has[F_MAP])
    s = import_ints("feature_table_map", &a[F_MAP], T, 0, nt - 1, &tmp);
  else if ((tmp = malloc(sizeof *tmp * (size_t)T)))
    for (int64_t t = 0; t < T; t++)
      tmp[t] = t;
  else
    s = tbe_error(TBE_ENOMEM, "feature_table_map", -1, "out of memory");
  if (s.code == TBE_OK)
    s = import_narrow("feature_table_map", tmp, T, &b->feature_table_map);
  free(tmp);
  tmp = NULL;
  if (s.code != TBE_OK)
    return s;

  const npy_array *ix = &a[F_IDX], *of = &a[F_OFF];
  if ((ix->dtype != NPY_I4 && ix->dtype != NPY_I8) || of->dtype != ix->dtype)
    return tbe_error(TBE_EINVAL, "indices", -1,
                     "indices.npy and offsets.npy must both hold '<i4' or both '<i8' (got "
                     "'%s' and '%s')", npy_dtype_descr(ix->dtype), npy_dtype_descr(of->dtype));
  b->itype = ix->dtype == NPY_I4 ? TBE_I32 : TBE_I64;
  b->N = ix->count;
  int64_t total_B = of->count - 1;
  if (total_B < 0)
    return tbe_error(TBE_EINVAL, "offsets", -1, "offsets.npy is empty (it needs total_B + 1)");
  if (has[F_BVBE]) {
    const npy_array *v = &a[F_BVBE];
    if (v->ndim != 2 || v->shape[0] != T || v->shape[1] < 1 || v->shape[1] > INT32_MAX)
      return tbe_error(TBE_EINVAL, "B_vbe", -1, "B_vbe.npy must be [T=%lld, R], got [%lld, %lld]",
                       (long long)T, (long long)v->shape[0], (long long)v->shape[1]);
    b->R = (int32_t)v->shape[1];
    s = import_ints("B_vbe", v, v->count, 0, INT32_MAX, &tmp);
    if (s.code == TBE_OK)
      s = import_narrow("B_vbe", tmp, v->count, &b->B_vbe);
    free(tmp);
    if (s.code == TBE_OK && tbe_total_B(b) != total_B)
      s = tbe_error(TBE_EINVAL, "offsets", -1,
                    "offsets.npy holds %lld values; B_vbe.npy's %lld bags need %lld",
                    (long long)of->count, (long long)tbe_total_B(b),
                    (long long)tbe_total_B(b) + 1);
  } else if (total_B % T != 0 || total_B / T > INT32_MAX) {
    s = tbe_error(TBE_EINVAL, "offsets", -1,
                  "offsets.npy holds %lld values: not T*B + 1 for T = %lld (VBE needs B_vbe.npy)",
                  (long long)of->count, (long long)T);
  } else {
    b->B = (int32_t)(total_B / T);
  }
  if (s.code != TBE_OK)
    return s;
  b->indices = import_take(&a[F_IDX]);
  b->offsets = import_take(&a[F_OFF]);
  if (has[F_PSW]) {
    if (a[F_PSW].dtype != NPY_F4 || a[F_PSW].count != b->N)
      return tbe_error(TBE_EINVAL, "per_sample_weights", -1,
                       "per_sample_weights.npy must hold %lld '<f4' values", (long long)b->N);
    b->per_sample_weights = import_take(&a[F_PSW]);
  }
  return tbe_ok();
}

/* --bounds none trusts the inputs (TBE_SEMANTICS.md 2: the engines read them unchecked), so a
 * capture that would fail the check is refused here, named by its first offender. */
static tbe_status import_trusted(tbe_batch *b)
{
  tbe_layout l;
  tbe_status s = tbe_layout_init(&l, b);
  int64_t warnings;
  if (s.code == TBE_OK)
    s = ref_bounds_check(b, &l, TBE_BOUNDS_FATAL, &warnings); /* FATAL repairs nothing */
  tbe_layout_free(&l);
  if (s.code == TBE_EBOUNDS) {
    char msg[sizeof s.message];
    memcpy(msg, s.message, sizeof msg);
    s.code = TBE_EINVAL;
    snprintf(s.message, sizeof s.message, "bounds mode none needs valid indices and offsets: %.200s",
             msg);
  }
  return s;
}

tbe_status import_dir(const char *dir, const import_options *o, tbe_batch *b, char *canon,
                      size_t n)
{
  memset(b, 0, sizeof *b);
  npy_array a[F_COUNT];
  int has[F_COUNT] = {0};
  uint64_t digest = ENG_FNV_SEED;
  tbe_status s = tbe_ok();
  memset(a, 0, sizeof a);
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return tbe_error(TBE_EINVAL, "dir", -1, "%s is not a directory", dir);
  for (int i = 0; i < F_COUNT && s.code == TBE_OK; i++)
    s = import_read(dir, import_files[i], import_required[i], &a[i], &has[i], &digest);
  if (s.code == TBE_OK) {
    b->pool = o->pool;
    b->out_dtype = o->out;
    s = import_build(a, has, b);
  }
  if (s.code == TBE_OK)
    s = tbe_batch_validate(b);
  if (s.code == TBE_OK && o->bounds == TBE_BOUNDS_NONE)
    s = import_trusted(b);
  for (int i = 0; i < F_COUNT; i++)
    npy_free(&a[i]);
  if (s.code != TBE_OK) {
    tbe_batch_free(b);
    return s;
  }
  snprintf(canon, n, "import digest=%016llx pool=%s out=%s bounds=%s",
           (unsigned long long)digest, tbe_pool_name(o->pool), tbe_dtype_name(o->out),
           tbe_bounds_name(o->bounds));
  return tbe_ok();
}
