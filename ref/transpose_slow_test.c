/* transpose_slow_test.c: the transpose at the scale (slow tier): 10^8 lookups with keys
 * past 2^40, checked by its invariants (sorted, stable, every lookup once, maximal runs) rather
 * than against a second sort, and for the same bits on 1 and 2 threads.
 * Not the quick tier's transpose_test.c.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "transpose.h"

#define N_LOOKUPS 100000000
#define BAGS 2000000 /* per feature: T = 2 features, 25 lookups per bag */

static uint64_t mix(uint64_t z)
{
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* FNV-1a over the sorted arrays: equal hashes for the same transpose */
static uint64_t hash_transpose(const ref_transpose *tr)
{
  uint64_t h = UINT64_C(0xCBF29CE484222325);
  for (int64_t i = 0; i < tr->n; i++)
    h = (h ^ (tr->key[i] * 31 + (uint64_t)tr->pos[i])) * UINT64_C(0x100000001B3);
  return h;
}

int main(void)
{
  static const int64_t E[] = {INT64_C(1) << 40, 1000};
  static const int32_t D[] = {1, 1}, map[] = {0, 1};
  tbe_batch b;
  memset(&b, 0, sizeof b);
  b.num_tables = 2;
  b.E = (int64_t *)E;
  b.D = (int32_t *)D;
  int64_t toff[3] = {0, E[0], E[0] + E[1]};
  b.table_offset = toff;
  b.T = 2;
  b.feature_table_map = (int32_t *)map;
  b.B = BAGS;
  b.itype = TBE_I64;
  b.N = N_LOOKUPS;
  int64_t *idx = malloc(sizeof *idx * (size_t)N_LOOKUPS);
  int64_t *off = malloc(sizeof *off * (2 * BAGS + 1));
  if (!idx || !off) {
    printf("SKIP: cannot allocate 10^8 lookups\n");
    return 77;
  }
  for (int64_t i = 0; i <= 2 * BAGS; i++)
    off[i] = i * (N_LOOKUPS / (2 * BAGS));
  /* feature 0: keys spread over 2^40 rows, every 7th one of 5 hot rows near the top; feature 1:
   * 1000 rows; every 16th lookup pruned */
  uint64_t key_sum = 0;
  int64_t kept = 0;
#pragma omp parallel for schedule(static) reduction(+ : key_sum, kept)
  for (int64_t p = 0; p < N_LOOKUPS; p++) {
    uint64_t x = mix((uint64_t)p + 1);
    int feature1 = p >= N_LOOKUPS / 2;
    int64_t v = feature1 ? (int64_t)(x % 1000)
                : x % 7 == 0 ? E[0] - 1 - (int64_t)(x % 5) : (int64_t)(x >> 24);
    idx[p] = x % 16 == 0 ? -1 : v;
    if (idx[p] != -1) {
      key_sum += (uint64_t)(feature1 ? E[0] + v : v);
      kept++;
    }
  }
  b.indices = idx;
  b.offsets = off;
  tbe_layout l;
  tbe_status st = tbe_batch_validate(&b);
  CHECK(st.code == TBE_OK, "validate: %s", st.message);
  st = tbe_layout_init(&l, &b);
  CHECK(st.code == TBE_OK, "layout: %s", st.message);
  uint64_t hashes[2];
  for (int threads = 1; threads <= 2; threads++) {
    omp_set_num_threads(threads);
    ref_transpose tr;
    double t0 = omp_get_wtime();
    st = ref_transpose_build(&b, &l, &tr);
    printf("%d thread(s): %.1f s\n", threads, omp_get_wtime() - t0);
    CHECK(st.code == TBE_OK, "build: %s", st.message);
    if (st.code)
      break;
    CHECK(tr.n == kept, "%lld entries, want %lld", (long long)tr.n, (long long)kept);
    uint64_t sum = 0;
    int64_t unsorted = 0, unstable = 0, runs = 0, bad_runs = 0;
    for (int64_t i = 0; i < tr.n; i++) {
      sum += tr.key[i];
      if (i > 0) {
        unsorted += tr.key[i] < tr.key[i - 1];
        unstable += tr.key[i] == tr.key[i - 1] && tr.pos[i] <= tr.pos[i - 1];
      }
      runs += i == 0 || tr.key[i] != tr.key[i - 1];
    }
    for (int64_t r = 0; r < tr.num_runs; r++)
      bad_runs += tr.key[tr.run_start[r]] != tr.key[tr.run_start[r + 1] - 1];
    CHECK(sum == key_sum, "the keys' sum changed: an entry was lost or duplicated");
    CHECK(unsorted == 0 && unstable == 0, "%lld out of order, %lld ties out of position order",
          (long long)unsorted, (long long)unstable);
    CHECK(tr.num_runs == runs && bad_runs == 0, "%lld runs (want %lld), %lld mixed",
          (long long)tr.num_runs, (long long)runs, (long long)bad_runs);
    hashes[threads - 1] = hash_transpose(&tr);
    ref_transpose_free(&tr);
  }
  CHECK(hashes[0] == hashes[1], "1 and 2 threads give different transposes");
  tbe_layout_free(&l);
  free(idx);
  free(off);
  return TEST_MAIN_RESULT();
}
