/* fuzz_bounds.c: libFuzzer target for the CPU bounds check (ref/bounds.c): a batch decoded from
 * the input, checked against a direct sequential model of TBE_SEMANTICS.md section 2 written
 * here. Not the bounds check's unit test (ref/bounds_test.c), which holds named examples.
 *
 * Input: mode, index dtype, VBE flag, T, tables and their E, the feature -> table map, B (or
 * B[t][r]), bag lengths, then corruptions of the offsets and the index values, each byte read
 * in that order (missing bytes read as 0). Asserted: no crash and no UB (the sanitizers); the
 * repaired offsets are the running clamp, non-decreasing in [0, N] and end at N; after
 * WARNING/IGNORE every index of a bag is valid or -1 (invalid ones became 0, -1 stayed, the
 * rest are untouched); the counter equals the formula; FATAL names the first offender in the
 * spec's order (offsets before indices, lowest bag, last offset as bag total_B, lowest
 * position) with its feature, bag, position and value, and changes nothing; NONE changes nothing.
 */
#include <string.h>

#include "bounds.h"
#include "fuzz.h"

#define MAX_T 4
#define MAX_R 3
#define MAX_BAGS (MAX_T * MAX_R * 4 + MAX_T * 6)
#define MAX_N (MAX_BAGS * 4 + 3)

/* An offset or index value near the interesting range [-2, top + 2], or an extreme one. */
static int64_t decode_value(fuzz_reader *r, int64_t top, tbe_itype it)
{
  uint8_t k = fuzz_u8(r);
  if (k < 224)
    return (int64_t)(k % (uint64_t)(top + 5)) - 2;
  int64_t lo = it == TBE_I32 ? INT32_MIN : INT64_MIN, hi = it == TBE_I32 ? INT32_MAX : INT64_MAX;
  switch (k % 6) {
  case 0: return lo;
  case 1: return hi;
  case 2: return -1;
  case 3: return top + 1;
  case 4: return it == TBE_I32 ? (int32_t)fuzz_u64(r) : (int64_t)fuzz_u64(r);
  default: return -(int64_t)fuzz_u8(r) - 3;
  }
}

typedef struct {
  tbe_batch b;
  int64_t E[MAX_T];
  int32_t D[MAX_T], map[MAX_T], B_vbe[MAX_T * MAX_R];
  int64_t table_offset[MAX_T + 1];
  int64_t off[MAX_BAGS + 1], idx[MAX_N]; /* the values as stored (the original inputs) */
  int32_t feature[MAX_BAGS];             /* the feature of each bag, counted here */
  int64_t total_B;
  float weights[1];
} fuzz_batch;

static tbe_bounds_mode decode(fuzz_reader *r, fuzz_batch *f)
{
  memset(f, 0, sizeof *f);
  tbe_batch *b = &f->b;
  uint8_t flags = fuzz_u8(r);
  b->itype = flags & 1 ? TBE_I64 : TBE_I32;
  int vbe = flags & 2;
  tbe_bounds_mode mode = (tbe_bounds_mode)(flags >> 2 & 3);
  b->T = 1 + fuzz_u8(r) % MAX_T;
  b->num_tables = 1 + fuzz_u8(r) % b->T;
  for (int j = 0; j < b->num_tables; j++) {
    uint8_t e = fuzz_u8(r);
    f->E[j] = e < 250 ? 1 + e % 9 : e == 250 ? (b->itype == TBE_I32 ? INT32_MAX : INT64_C(1) << 40)
                                             : 1 + fuzz_u16(r);
    f->D[j] = 1;
    f->table_offset[j + 1] = f->table_offset[j] + f->E[j]; /* no weights: none are read */
  }
  for (int t = 0; t < b->T; t++)
    f->map[t] = fuzz_u8(r) % b->num_tables;
  if (vbe) {
    b->R = 1 + fuzz_u8(r) % MAX_R;
    for (int i = 0; i < b->T * b->R; i++)
      f->B_vbe[i] = fuzz_u8(r) % 5;
    b->B_vbe = f->B_vbe;
  } else {
    b->B = fuzz_u8(r) % 7;
  }
  for (int t = 0, bag = 0; t < b->T; t++) {
    int n = vbe ? 0 : b->B;
    for (int rk = 0; vbe && rk < b->R; rk++)
      n += f->B_vbe[t * b->R + rk];
    for (int i = 0; i < n; i++)
      f->feature[bag++] = t;
    f->total_B += n;
  }
  /* valid offsets from bag lengths, N possibly past the last, then corruptions */
  for (int64_t i = 0; i < f->total_B; i++)
    f->off[i + 1] = f->off[i] + fuzz_u8(r) % 5;
  b->N = f->off[f->total_B];
  uint8_t extra = fuzz_u8(r);
  if (extra >= 240)
    b->N += extra % 4;
  int corruptions = fuzz_u8(r) % 6;
  for (int c = 0; c < corruptions; c++) {
    int64_t at = fuzz_u8(r) % (f->total_B + 1);
    f->off[at] = decode_value(r, b->N, b->itype);
  }
  int64_t emax = 0;
  for (int j = 0; j < b->num_tables; j++)
    emax = f->E[j] > emax && f->E[j] < 64 ? f->E[j] : emax;
  for (int64_t p = 0; p < b->N; p++)
    f->idx[p] = decode_value(r, emax, b->itype);
  /* store as the itype (a narrowing keeps the low bits; the model reads them back) */
  static union { int32_t i32[MAX_N + MAX_BAGS + 1]; int64_t i64[MAX_N + MAX_BAGS + 1]; } store;
  b->indices = b->itype == TBE_I32 ? (void *)store.i32 : (void *)store.i64;
  b->offsets = b->itype == TBE_I32 ? (void *)(store.i32 + MAX_N) : (void *)(store.i64 + MAX_N);
  for (int64_t p = 0; p < b->N; p++) {
    tbe_iset(b->indices, b->itype, p, f->idx[p]);
    f->idx[p] = tbe_iget(b->indices, b->itype, p);
  }
  for (int64_t i = 0; i <= f->total_B; i++) {
    tbe_iset(b->offsets, b->itype, i, f->off[i]);
    f->off[i] = tbe_iget(b->offsets, b->itype, i);
  }
  b->E = f->E;
  b->D = f->D;
  b->table_offset = f->table_offset;
  b->weights = f->weights;
  b->feature_table_map = f->map;
  return mode;
}

/* The bag of feature-major bag number i is bad (judged on the original offsets)? */
static int bad_bag(const fuzz_batch *f, int64_t i)
{
  int64_t start = f->off[i], end = i == f->total_B - 1 ? f->b.N : f->off[i + 1];
  return start < 0 || start > end || end > f->b.N;
}

static int64_t rows_of_bag(const fuzz_batch *f, int64_t i)
{
  return f->E[f->map[f->feature[i]]];
}

static int index_ok(int64_t v, int64_t E) { return v == -1 || (v >= 0 && v < E); }

/* FATAL: the first offender in the spec's order, and nothing changed. */
static void check_fatal(const fuzz_batch *f, tbe_status s)
{
  const tbe_batch *b = &f->b;
  int64_t bag = -1, feature = 0, position = 0, value = 0;
  for (int64_t i = 0; bag < 0 && i < f->total_B; i++)
    if (bad_bag(f, i))
      bag = i, feature = f->feature[i], position = i, value = f->off[i];
  if (bag < 0 && f->off[f->total_B] != b->N)
    bag = position = f->total_B, feature = -1, value = f->off[f->total_B];
  for (int64_t i = 0; bag < 0 && i < f->total_B; i++)
    for (int64_t p = f->off[i]; bag < 0 && p < f->off[i + 1]; p++)
      if (!index_ok(f->idx[p], rows_of_bag(f, i)))
        bag = i, feature = f->feature[i], position = p, value = f->idx[p];
  if (bag < 0) {
    FUZZ_CHECK(s.code == TBE_OK, "FATAL failed on valid inputs: %s", s.message);
    return;
  }
  FUZZ_CHECK(s.code == TBE_EBOUNDS, "FATAL missed the offender at bag %lld: %s", (long long)bag,
             s.message);
  FUZZ_CHECK(s.bag == bag && s.feature == feature && s.position == position && s.value == value,
             "FATAL named (feature %lld, bag %lld, position %lld, value %lld), the first offender "
             "is (%lld, %lld, %lld, %lld)", (long long)s.feature, (long long)s.bag,
             (long long)s.position, (long long)s.value, (long long)feature, (long long)bag,
             (long long)position, (long long)value);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static fuzz_batch f;
  fuzz_reader r = {data, size};
  tbe_bounds_mode mode = decode(&r, &f);
  tbe_batch *b = &f.b;
  FUZZ_CHECK(tbe_batch_validate(b).code == TBE_OK, "decoded an invalid batch");
  tbe_layout l;
  FUZZ_CHECK(tbe_layout_init(&l, b).code == TBE_OK, "no layout");
  int64_t warnings = -1;
  tbe_status s = ref_bounds_check(b, &l, mode, &warnings);
  tbe_layout_free(&l);
  const int64_t N = b->N, total_B = f.total_B;

  if (mode == TBE_BOUNDS_FATAL)
    check_fatal(&f, s);
  else
    FUZZ_CHECK(s.code == TBE_OK, "%s failed: %s", tbe_bounds_name(mode), s.message);
  FUZZ_CHECK(mode == TBE_BOUNDS_WARNING || warnings == 0, "%s reported %lld warnings",
             tbe_bounds_name(mode), (long long)warnings);
  if (mode == TBE_BOUNDS_FATAL || mode == TBE_BOUNDS_NONE) {
    for (int64_t i = 0; i <= total_B; i++)
      FUZZ_CHECK(tbe_iget(b->offsets, b->itype, i) == f.off[i], "%s changed offsets[%lld]",
                 tbe_bounds_name(mode), (long long)i);
    for (int64_t p = 0; p < N; p++)
      FUZZ_CHECK(tbe_iget(b->indices, b->itype, p) == f.idx[p], "%s changed indices[%lld]",
                 tbe_bounds_name(mode), (long long)p);
    return 0;
  }

  /* WARNING, IGNORE: the running clamp, then the indices of the repaired bags */
  int64_t bad = f.off[total_B] != N, prev = 0;
  for (int64_t i = 0; i <= total_B; i++) {
    int64_t o = f.off[i] < N ? f.off[i] : N;
    int64_t want = i == total_B ? N : i == 0 ? (o < 0 ? 0 : o) : (o > prev ? o : prev);
    int64_t got = tbe_iget(b->offsets, b->itype, i);
    FUZZ_CHECK(got == want, "offsets[%lld] repaired to %lld, the running clamp gives %lld",
               (long long)i, (long long)got, (long long)want);
    FUZZ_CHECK(got >= prev && got >= 0 && got <= N, "repaired offsets[%lld] = %lld: not "
               "non-decreasing in [0, %lld]", (long long)i, (long long)got, (long long)N);
    if (i < total_B)
      bad += bad_bag(&f, i);
    prev = got;
  }
  int64_t first = total_B ? tbe_iget(b->offsets, b->itype, 0) : N;
  for (int64_t p = 0; p < first; p++)
    FUZZ_CHECK(tbe_iget(b->indices, b->itype, p) == f.idx[p], "index %lld outside every bag "
               "changed", (long long)p);
  for (int64_t i = 0; i < total_B; i++) {
    int64_t E = rows_of_bag(&f, i);
    for (int64_t p = tbe_iget(b->offsets, b->itype, i); p < tbe_iget(b->offsets, b->itype, i + 1);
         p++) {
      int64_t got = tbe_iget(b->indices, b->itype, p), ok = index_ok(f.idx[p], E);
      bad += !ok;
      FUZZ_CHECK(got == (ok ? f.idx[p] : 0), "indices[%lld] = %lld became %lld (E = %lld)",
                 (long long)p, (long long)f.idx[p], (long long)got, (long long)E);
      FUZZ_CHECK(index_ok(got, E), "indices[%lld] = %lld is not valid or -1 after the repair",
                 (long long)p, (long long)got);
    }
  }
  if (mode == TBE_BOUNDS_WARNING)
    FUZZ_CHECK(warnings == bad, "counter %lld, the formula gives %lld", (long long)warnings,
               (long long)bad);
  return 0;
}
