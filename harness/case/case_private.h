/* case_private.h: the fields of a parsed case, shared by the parser (case.c), random cases
 * (case_random.c), the generator (gen.c) and the footprint (footprint.c) alone. Not for code
 * outside harness/case/, which reaches a case through case.h.
 *
 * Invariant: a tbe_case built by case_parse is normalised, so two cases that format to the same
 * text have equal fields: T, R and num_tables are resolved; map always holds T entries; a list of
 * equal values is FIXED; a range a..a is FIXED; L=normal with sigma 0 is FIXED; hot entries are
 * sorted by (table, row); invalid_kind is PAST when invalid is 0; psw is 0 unless psw_fixed
 * (which needs weighted), and an fp32 value that is 0 or normal; R is 1 unless vbe; the
 * backward's fields hold their defaults unless opt is set (lambda 0 unless wd is l2 or
 * decouple, step 0 unless sr=1), and lr, eps, lambda, clip are fp32 values.
 */
#ifndef HARNESS_CASE_PRIVATE_H
#define HARNESS_CASE_PRIVATE_H

#include <stdint.h>

#include "case.h"


typedef enum { CASE_FIXED, CASE_RANGE, CASE_LIST, CASE_NORMAL } case_spec_kind;

/* A per-table, per-bag or per-(feature, rank) quantity: one value, a uniform range lo..hi, an
 * explicit list (count values), or a rounded normal(mu, sigma) clamped at 0 (L only). */
typedef struct {
  case_spec_kind kind;
  int64_t lo, hi;
  int64_t *list;
  int64_t count;
  double mu, sigma;
} case_spec;

typedef enum { CASE_DIST_UNIFORM, CASE_DIST_ZIPF } case_dist;
typedef enum {
  CASE_INVALID_PAST,
  CASE_INVALID_NEGATIVE,
  CASE_INVALID_PRUNED,
  CASE_INVALID_MIX
} case_invalid_kind;
typedef enum {
  CASE_CORRUPT_NEGATIVE,
  CASE_CORRUPT_DECREASING,
  CASE_CORRUPT_PAST_END,
  CASE_CORRUPT_WRONG_LAST,
  CASE_CORRUPT_KINDS
} case_corrupt_kind;

/* Row `row` of table `table` appears exactly `sl` times among the indices. */
typedef struct {
  int32_t table;
  int64_t row;
  int64_t sl;
} case_hot;

struct tbe_case {
  int32_t T;
  case_spec B;            /* FIXED; with vbe also RANGE, or LIST of T*R (feature-major) */
  int32_t R;
  int vbe;
  case_spec E, D;         /* FIXED, RANGE or LIST of num_tables */
  int32_t num_tables;
  int32_t *map;           /* [T] feature_table_map */
  case_spec L;            /* FIXED, RANGE or NORMAL */
  case_dist dist;
  double alpha;           /* zipf exponent, > 0 */
  case_hot *hot;          /* [num_hot], sorted by (table, row) */
  int32_t num_hot;
  tbe_dtype wdtype, out;
  tbe_itype idx;
  tbe_pool pool;
  int weighted;
  int psw_fixed;          /* 1: every per-sample weight is psw; 0: drawn */
  float psw;
  double invalid;         /* fraction of non-hot positions given an invalid index */
  case_invalid_kind invalid_kind;
  int64_t corrupt[CASE_CORRUPT_KINDS]; /* offsets corrupted per kind, 0 = none */
  tbe_bounds_mode bounds;
  tbe_knobs knobs;        /* knobs.bwd.opt.seed always equals seed */
  uint64_t seed;
};

/* Limits of the language (parse rejects values outside them). */
#define CASE_MAX_T 4096
#define CASE_MAX_R 1024
#define CASE_MAX_TABLES 4096
#define CASE_MAX_HOT 64
#define CASE_MAX_ROWS (INT64_C(1) << 40)
#define CASE_MAX_COUNT INT64_C(2147483647) /* B, L values and corruption counts */
#define CASE_MAX_SL (INT64_C(1) << 40)
#define CASE_MAX_ALPHA 100.0

#endif
