/* transpose_test.c: the backward's transpose: a hand-checked batch (shared interleaved tables,
 * -1 entries, empty bags, VBE), random batches against a reference stable sort, keys past 2^40
 * (sorted packed with their positions, and too wide to pack), thread-count invariance, and the errors for inputs the bounds check has not repaired.
 * Not the sums (backward_test.c).
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "test_batch.h"
#include "test_util.h"
#include "transpose.h"

/* Validates b, lays it out and builds its transpose; returns the build's status. */
static tbe_status build(const tbe_batch *b, tbe_layout *l, ref_transpose *tr)
{
  tbe_status st = tbe_batch_validate(b);
  CHECK(st.code == TBE_OK, "validate: %s", st.message);
  st = tbe_layout_init(l, b);
  CHECK(st.code == TBE_OK, "layout: %s", st.message);
  return ref_transpose_build(b, l, tr);
}

static void test_hand(void)
{
  /* tables E = (4, 3); features map 0,1,0 (table 0 shared, interleaved); B = 2.
   * bags: f0 b0 {2, 0, -1}, f0 b1 {2}, f1 b0 {1, 1}, f1 b1 {}, f2 b0 {0, -1}, f2 b1 {3, 2} */
  static const int64_t E[] = {4, 3};
  static const int32_t D[] = {2, 3};
  static const int32_t map[] = {0, 1, 0};
  static const int64_t off[] = {0, 3, 4, 6, 6, 8, 10};
  static const int64_t idx[] = {2, 0, -1, 2, 1, 1, 0, -1, 3, 2};
  tb_spec s = {
      .num_tables = 2,
      .E = E,
      .D = D,
      .T = 3,
      .map = map,
      .B = 2,
      .itype = TBE_I32,
      .N = 10,
      .indices = idx,
      .offsets = off,
  };
  tbe_batch b = tb_build(&s);
  tbe_layout l;
  ref_transpose tr;
  tbe_status st = build(&b, &l, &tr);
  CHECK(st.code == TBE_OK, "build: %s", st.message);
  /* keys: table 0 rows 0..3 -> 0..3, table 1 rows -> 4..6; sorted, ties in position order */
  static const uint64_t key[] = {0, 0, 2, 2, 2, 3, 5, 5};
  static const int64_t pos[] = {1, 6, 0, 3, 9, 8, 4, 5};
  static const int32_t bag[] = {0, 4, 0, 1, 5, 5, 2, 2};
  static const int64_t run_start[] = {0, 2, 5, 6, 8};
  CHECK(tr.n == 8 && tr.num_runs == 4, "n %lld runs %lld", (long long)tr.n,
        (long long)tr.num_runs);
  for (int64_t i = 0; i < 8 && tr.n == 8; i++)
    CHECK(tr.key[i] == key[i] && tr.pos[i] == pos[i] && tr.bag[i] == bag[i],
          "entry %lld: key %llu pos %lld bag %d", (long long)i, (unsigned long long)tr.key[i],
          (long long)tr.pos[i], tr.bag[i]);
  for (int64_t r = 0; r <= 4 && tr.num_runs == 4; r++)
    CHECK(tr.run_start[r] == run_start[r], "run_start[%lld] = %lld", (long long)r,
          (long long)tr.run_start[r]);
  int64_t row;
  CHECK(ref_transpose_table(&tr, &b, &l, 3, &row) == 1 && row == 1, "run 3 is table 1 row 1");
  CHECK(ref_transpose_table(&tr, &b, &l, 1, &row) == 0 && row == 2, "run 1 is table 0 row 2");
  CHECK(tr.rows_cumsum[0] == 0 && tr.rows_cumsum[1] == 4 && tr.rows_cumsum[2] == 7,
        "rows_cumsum");
  ref_transpose_free(&tr);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
}

/* A random batch with num_tables tables of E_j rows (D = 1, no weights allocated: the
 * transpose reads none), T features mapped at random, B bags of 0..maxL lookups; a share of -1. */
static tbe_batch random_batch(uint64_t *x, int32_t tables, const int64_t *E, int32_t T,
                              int32_t B, int maxL)
{
  tbe_batch b;
  memset(&b, 0, sizeof b);
  b.num_tables = tables;
  b.E = malloc(sizeof *b.E * (size_t)tables);
  b.D = malloc(sizeof *b.D * (size_t)tables);
  b.table_offset = malloc(sizeof *b.table_offset * (size_t)(tables + 1));
  b.table_offset[0] = 0;
  for (int32_t j = 0; j < tables; j++) {
    b.E[j] = E[j];
    b.D[j] = 1;
    b.table_offset[j + 1] = b.table_offset[j] + E[j];
  }
  b.T = T;
  b.feature_table_map = malloc(sizeof(int32_t) * (size_t)T);
  for (int32_t t = 0; t < T; t++) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    b.feature_table_map[t] = (int32_t)((*x >> 33) % (uint64_t)tables);
  }
  b.B = B;
  b.itype = TBE_I64;
  int64_t nb = (int64_t)T * B;
  int64_t *off = malloc(sizeof *off * (size_t)(nb + 1));
  off[0] = 0;
  for (int64_t i = 0; i < nb; i++) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    off[i + 1] = off[i] + (int64_t)((*x >> 33) % (uint64_t)(maxL + 1));
  }
  b.N = off[nb];
  int64_t *idx = malloc(sizeof *idx * (size_t)(b.N + 1));
  for (int64_t i = 0; i < nb; i++) {
    int64_t Ej = E[b.feature_table_map[i / B]];
    for (int64_t p = off[i]; p < off[i + 1]; p++) {
      *x = *x * 6364136223846793005ull + 1442695040888963407ull;
      uint64_t r = *x >> 16;
      /* a few hot rows, the rest spread over the table, 5% pruned */
      idx[p] = r % 20 == 0 ? -1 : r % 3 == 0 ? (int64_t)(r >> 8) % (Ej < 4 ? Ej : 4)
                                              : (int64_t)((r >> 8) % (uint64_t)Ej);
    }
  }
  b.indices = idx;
  b.offsets = off;
  b.weights = NULL;
  return b;
}

typedef struct {
  uint64_t key;
  int64_t pos;
} kp;

static int kp_cmp(const void *a, const void *b)
{
  const kp *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The transpose equals a direct construction: keys by position, qsort by (key, position). */
static void check_against_qsort(const tbe_batch *b, const tbe_layout *l, const ref_transpose *tr)
{
  int64_t *rc = malloc(sizeof *rc * (size_t)(b->num_tables + 1));
  rc[0] = 0;
  for (int32_t j = 0; j < b->num_tables; j++)
    rc[j + 1] = rc[j] + b->E[j];
  kp *want = malloc(sizeof *want * (size_t)(b->N + 1));
  int32_t *bag_of = malloc(sizeof *bag_of * (size_t)(b->N + 1));
  int64_t n = 0;
  for (int64_t i = 0; i < l->total_B; i++)
    for (int64_t p = tbe_iget(b->offsets, b->itype, i); p < tbe_iget(b->offsets, b->itype, i + 1);
         p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      bag_of[p] = (int32_t)i;
      if (idx != -1)
        want[n++] = (kp){(uint64_t)(rc[b->feature_table_map[l->bag_feature[i]]] + idx), p};
    }
  qsort(want, (size_t)n, sizeof *want, kp_cmp);
  CHECK(tr->n == n, "%lld entries, want %lld", (long long)tr->n, (long long)n);
  int64_t bad = 0, runs = 0;
  for (int64_t i = 0; i < n && tr->n == n; i++) {
    bad += tr->key[i] != want[i].key || tr->pos[i] != want[i].pos ||
           tr->bag[i] != bag_of[want[i].pos];
    runs += i == 0 || want[i].key != want[i - 1].key;
  }
  CHECK(bad == 0, "%lld entries differ from the stable sort", (long long)bad);
  CHECK(tr->num_runs == runs, "%lld runs, want %lld", (long long)tr->num_runs, (long long)runs);
  for (int64_t r = 0; r < tr->num_runs && tr->num_runs == runs; r++) {
    int64_t s = tr->run_start[r], e = tr->run_start[r + 1];
    CHECK(e > s && tr->key[s] == tr->key[e - 1] && (s == 0 || tr->key[s - 1] < tr->key[s]),
          "run %lld [%lld, %lld) is not a maximal run of one key", (long long)r, (long long)s,
          (long long)e);
  }
  free(rc);
  free(want);
  free(bag_of);
}

static int same_transpose(const ref_transpose *a, const ref_transpose *b)
{
  return a->n == b->n && a->num_runs == b->num_runs &&
         !memcmp(a->key, b->key, sizeof *a->key * (size_t)a->n) &&
         !memcmp(a->pos, b->pos, sizeof *a->pos * (size_t)a->n) &&
         !memcmp(a->bag, b->bag, sizeof *a->bag * (size_t)a->n) &&
         !memcmp(a->run_start, b->run_start, sizeof *a->run_start * (size_t)(a->num_runs + 1));
}

static void test_random(void)
{
  uint64_t x = 42;
  /* tiny tables; tables past 2^32 and up to 2^40 rows (keys past 2^40); many features */
  static const int64_t E1[] = {1, 5, 17};
  static const int64_t E2[] = {INT64_C(1) << 40, 3, (INT64_C(1) << 33) + 7};
  static const int64_t E3[] = {100000, 1000, 10};
  /* 48 tables of 2^40 rows: 46-bit keys and 2^19+ positions do not pack into one word */
  static int64_t E4[48];
  for (int j = 0; j < 48; j++)
    E4[j] = INT64_C(1) << 40;
  struct {
    const int64_t *E;
    int32_t tables, T, B;
    int maxL;
  } shapes[] = {{E1, 3, 4, 50, 6}, {E2, 3, 5, 200, 30}, {E3, 3, 9, 3000, 40}, {E1, 1, 1, 0, 3},
                {E3, 3, 2, 5, 0},  {E4, 48, 48, 500, 50}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    tbe_batch b = random_batch(&x, shapes[k].tables, shapes[k].E, shapes[k].T, shapes[k].B,
                               shapes[k].maxL);
    tbe_layout l;
    ref_transpose first;
    int threads[] = {1, 2, 3, 7};
    for (int t = 0; t < 4; t++) {
      omp_set_num_threads(threads[t]);
      ref_transpose tr;
      tbe_status st = build(&b, &l, &tr);
      CHECK(st.code == TBE_OK, "shape %zu: %s", k, st.message);
      if (t == 0) {
        check_against_qsort(&b, &l, &tr);
        first = tr;
      } else {
        CHECK(same_transpose(&first, &tr), "shape %zu: %d threads differ from 1", k,
              threads[t]);
        ref_transpose_free(&tr);
      }
      tbe_layout_free(&l);
    }
    omp_set_num_threads(2);
    ref_transpose_free(&first);
    tbe_batch_free(&b);
  }
}

static void test_errors(void)
{
  static const int64_t E[] = {4};
  static const int32_t D[] = {1};
  static const int64_t off[] = {0, 2, 4};
  int64_t idx[] = {0, 1, 3, 2};
  tb_spec s = {
      .num_tables = 1,
      .E = E,
      .D = D,
      .T = 1,
      .B = 2,
      .itype = TBE_I64,
      .N = 4,
      .indices = idx,
      .offsets = off,
  };
  idx[2] = 4; /* past E */
  tbe_batch b = tb_build(&s);
  tbe_layout l;
  ref_transpose tr;
  tbe_status st = build(&b, &l, &tr);
  CHECK(st.code == TBE_EINVAL && !strcmp(st.field, "indices") && st.position == 2,
        "index past E: %s %s %lld", tbe_code_name(st.code), st.field, (long long)st.position);
  CHECK(tr.key == NULL && tr.run_start == NULL, "a failed build leaves nothing allocated");
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  idx[2] = -2; /* negative, not -1 */
  b = tb_build(&s);
  st = build(&b, &l, &tr);
  CHECK(st.code == TBE_EINVAL && st.position == 2, "index -2: %s", st.message);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  idx[2] = 3;
  static const int64_t bad_off[] = {0, 3, 2};
  s.offsets = bad_off; /* decreasing: not repaired */
  b = tb_build(&s);
  st = build(&b, &l, &tr);
  CHECK(st.code == TBE_EINVAL && !strcmp(st.field, "offsets") && st.position == 1,
        "decreasing offsets: %s %s %lld", tbe_code_name(st.code), st.field,
        (long long)st.position);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
}

int main(void)
{
  test_hand();
  test_random();
  test_errors();
  return TEST_MAIN_RESULT();
}
