/* tbe.h: the public data model of tbecheck: tables, features, a batch of bags, dtypes, modes,
 * and the status every library function returns. Not the math itself (see forward.h, bounds.h).
 *
 * Invariant: a tbe_batch that passed tbe_batch_validate() is internally consistent: every array
 * has the length its counts imply, every size fits in int64 (and positions in int32 when the
 * index dtype is int32), and tbe_layout_init() can describe its output without overflow. Only
 * the values of indices and offsets may still be out of range; the bounds check deals with those.
 * Letters follow TBE_SEMANTICS.md section 1: T features, E rows, D columns, B bags, L bag length,
 * N indices, R ranks (VBE).
 */
#ifndef TBE_H
#define TBE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TBE_MAX_D 2048

typedef enum { TBE_FP32 = 0, TBE_FP16 = 1, TBE_BF16 = 2 } tbe_dtype;
typedef enum { TBE_I32 = 0, TBE_I64 = 1 } tbe_itype;
typedef enum { TBE_POOL_SUM = 0, TBE_POOL_MEAN = 1, TBE_POOL_NONE = 2 } tbe_pool;
typedef enum {
  TBE_BOUNDS_FATAL = 0,
  TBE_BOUNDS_WARNING = 1,
  TBE_BOUNDS_IGNORE = 2,
  TBE_BOUNDS_NONE = 3
} tbe_bounds_mode;

typedef enum {
  TBE_OK = 0,
  TBE_EINVAL,      /* inconsistent or unsupported input; field/position say where */
  TBE_EBOUNDS,     /* bounds check in FATAL mode found an offender (feature, bag, position, value) */
  TBE_ENOMEM,      /* an allocation failed, or a size does not fit in memory */
  TBE_EIO,         /* a file could not be read or written */
  TBE_ENODEV,      /* no usable GPU (or built without CUDA) */
  TBE_EINTERNAL    /* a broken invariant: a bug in tbecheck */
} tbe_code;

/* What went wrong and where. `field` names the offending input ("offsets", "D", "B[3][1]"...);
 * position is an element index into that field, or -1. For TBE_EBOUNDS, feature/bag/position/value
 * name the first offender (TBE_SEMANTICS.md section 2); bag == total_B means the last offset. */
typedef struct {
  tbe_code code;
  char field[48];
  int64_t position;
  int64_t feature, bag, value;
  char message[256];
} tbe_status;

/* A batch: the tables and one call's lookups. Arrays are owned by whoever built the batch;
 * tbe_batch_free() releases batches whose arrays came from malloc (generator, .npy import). */
typedef struct {
  /* tables */
  int32_t num_tables;
  int64_t *E;                 /* [num_tables] rows */
  int32_t *D;                 /* [num_tables] columns, 1..TBE_MAX_D */
  tbe_dtype wdtype;
  void *weights;              /* flat, table j at table_offset[j] elements, row-major E_j x D_j */
  int64_t *table_offset;      /* [num_tables + 1] element offsets, table_offset[num_tables] = total */

  /* features */
  int32_t T;
  int32_t *feature_table_map; /* [T] */

  /* bags: fixed batch (R == 0): B bags per feature; VBE (R >= 1): B_vbe[t*R + r] bags */
  int32_t B;
  int32_t R;
  int32_t *B_vbe;             /* [T * R] when R >= 1, else NULL */

  /* lookups (indices and offsets share itype) */
  tbe_itype itype;
  int64_t N;
  void *indices;              /* [N] */
  void *offsets;              /* [total_B + 1] */
  float *per_sample_weights;  /* [N] or NULL */

  tbe_pool pool;
  tbe_dtype out_dtype;
} tbe_batch;

/* Derived shapes of a validated batch (TBE_SEMANTICS.md section 1). Owned arrays. */
typedef struct {
  int64_t total_B;            /* bags */
  int64_t *B_offsets;         /* [T + 1] first bag of each feature */
  int64_t *D_offsets;         /* [T + 1] first output column of each feature */
  int64_t total_D;
  int64_t out_elems;          /* elements of the output */
  int64_t *bag_out;           /* [total_B] first output element of each pooled bag (NULL for NONE) */
  int32_t *bag_feature;       /* [total_B] feature of each bag */
  int32_t max_D;
} tbe_layout;

/* Status helpers. tbe_ok() returns a success status; tbe_error() fills code, field, position
 * and a printf-style message. */
tbe_status tbe_ok(void);
tbe_status tbe_error(tbe_code code, const char *field, int64_t position, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *tbe_code_name(tbe_code code);

const char *tbe_dtype_name(tbe_dtype t);
const char *tbe_itype_name(tbe_itype t);
const char *tbe_pool_name(tbe_pool p);
const char *tbe_bounds_name(tbe_bounds_mode m);
size_t tbe_dtype_size(tbe_dtype t);
size_t tbe_itype_size(tbe_itype t);

/* Bags of the batch (fixed: T*B; VBE: the sum of B_vbe). */
int64_t tbe_total_B(const tbe_batch *b);

/* Index/offset element i of an itype array, widened to int64; and the store. */
static inline int64_t tbe_iget(const void *a, tbe_itype t, int64_t i)
{
  return t == TBE_I32 ? (int64_t)((const int32_t *)a)[i] : ((const int64_t *)a)[i];
}
static inline void tbe_iset(void *a, tbe_itype t, int64_t i, int64_t v)
{
  if (t == TBE_I32)
    ((int32_t *)a)[i] = (int32_t)v;
  else
    ((int64_t *)a)[i] = v;
}

/* Checks every structural rule of the data model: counts, D range, feature_table_map range,
 * table_offset consistency, pooling rules (MEAN with per-sample weights, NONE with mixed D or
 * VBE or per-sample weights), int32 index dtype with N or a table's E past INT32_MAX, and sizes
 * that overflow int64 or cannot be allocated. Does not look at index or offset values. */
tbe_status tbe_batch_validate(const tbe_batch *b);

/* Fills *l for a validated batch. Returns TBE_ENOMEM if the arrays cannot be allocated. */
tbe_status tbe_layout_init(tbe_layout *l, const tbe_batch *b);
void tbe_layout_free(tbe_layout *l);

/* Frees every array of a malloc-built batch and zeroes it. */
void tbe_batch_free(tbe_batch *b);

/* Bytes of a checked product a*b (or SIZE_MAX on overflow): allocation sizes go through this. */
size_t tbe_mul_size(size_t a, size_t b);

#ifdef __cplusplus
}
#endif

#endif
