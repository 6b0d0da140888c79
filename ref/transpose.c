/* transpose.c: linear keys, a stable parallel LSD radix sort, and run-length encoding (the
 * backward's transpose, transpose.h). Not the GPU's CUB sort, which must give the same order.
 *
 * The sort is stable by construction, so its result is unique and independent of the thread
 * count: each pass splits the entries into one contiguous block per thread, counts the digits of
 * each block, gives bucket (digit, thread) the offset of all entries with a smaller digit plus
 * those of the same digit in earlier blocks, and scatters each block in order. A pass whose digit
 * is the same for every entry is skipped. Entries enter in position order (bags are
 * feature-major and offsets nondecreasing), so ties keep position order. Only (key, position)
 * pairs move, 8-bit digits at a time (256 buckets: few enough write streams for the TLB), packed
 * into one word (key above the position's bits) when both fit in 64 bits, so the passes over the
 * key's digits move 8 bytes per entry; each entry's bag is looked up from its position after.
 */
#include "transpose.h"

#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "speed.h"

#define BAG_BLOCK 4096   /* bags per work item while gathering the entries */
#define RADIX_MAX_BITS 8

void ref_transpose_free(ref_transpose *tr)
{
  free(tr->key);
  free(tr->pos);
  free(tr->bag);
  free(tr->run_start);
  free(tr->rows_cumsum);
  memset(tr, 0, sizeof *tr);
}

int32_t ref_transpose_table(const ref_transpose *tr, const tbe_batch *b, const tbe_layout *l,
                            int64_t r, int64_t *row)
{
  int64_t first = tr->run_start[r];
  int32_t j = b->feature_table_map[l->bag_feature[tr->bag[first]]];
  *row = (int64_t)(tr->key[first] - (uint64_t)tr->rows_cumsum[j]);
  return j;
}

/* Counts block k's entries. The first bag whose offsets are not repaired goes to *bad_bag, the
 * first position whose index is neither -1 nor in its table to *bad_pos (-1: none). */
static int64_t count_block(const tbe_batch *b, const tbe_layout *l, int64_t k, int64_t *bad_bag,
                           int64_t *bad_pos)
{
  int64_t first = k * BAG_BLOCK, last = first + BAG_BLOCK;
  if (last > l->total_B)
    last = l->total_B;
  int64_t n = 0;
  *bad_bag = *bad_pos = -1;
  for (int64_t i = first; i < last; i++) {
    int64_t s = tbe_iget(b->offsets, b->itype, i), e = tbe_iget(b->offsets, b->itype, i + 1);
    if (s < 0 || s > e || e > b->N) {
      *bad_bag = i;
      return n;
    }
    int64_t E = b->E[b->feature_table_map[l->bag_feature[i]]];
    for (int64_t p = s; p < e; p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      if (idx == -1)
        continue;
      if (idx < 0 || idx >= E) {
        *bad_pos = p;
        return n;
      }
      n++;
    }
  }
  return n;
}

/* The sorting arrays: keys (packed with their positions when pos is NULL, the key above bit
 * `shift`), their positions, and the scatter's targets. */
typedef struct {
  uint64_t *key, *key2;
  int64_t *pos, *pos2;
  int shift;
} sort_arrays;

/* Writes block k's entries (key, position) from entry `at` on, and every position's bag. */
static void fill_block(const tbe_batch *b, const tbe_layout *l, const int64_t *rows_cumsum,
                       int64_t k, int64_t at, const sort_arrays *a, int32_t *bag_of_pos)
{
  int64_t first = k * BAG_BLOCK, last = first + BAG_BLOCK;
  if (last > l->total_B)
    last = l->total_B;
  for (int64_t i = first; i < last; i++) {
    int64_t s = tbe_iget(b->offsets, b->itype, i), e = tbe_iget(b->offsets, b->itype, i + 1);
    uint64_t base = (uint64_t)rows_cumsum[b->feature_table_map[l->bag_feature[i]]];
    for (int64_t p = s; p < e; p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      bag_of_pos[p] = (int32_t)i;
      if (idx == -1)
        continue;
      uint64_t key = base + (uint64_t)idx;
      if (a->pos) {
        a->key[at] = key;
        a->pos[at] = p;
      } else {
        a->key[at] = key << a->shift | (uint64_t)p;
      }
      at++;
    }
  }
}

/* Sorts a->key[0..n) (and positions) stably by bits [shift, shift + bits) of the keys; the
 * sorted arrays end up in a->key, a->pos (pointers swapped with the *2 arrays as passes go).
 * hist holds threads * 2^RADIX_MAX_BITS counters. */
static void radix_sort(sort_arrays *a, int64_t n, int bits, int64_t *hist, int threads)
{
  int passes = (bits + RADIX_MAX_BITS - 1) / RADIX_MAX_BITS;
  if (passes == 0)
    return;
  int width = (bits + passes - 1) / passes;
  int64_t buckets = INT64_C(1) << width;
  uint64_t mask = (uint64_t)buckets - 1;
  int skip = 0;
#pragma omp parallel num_threads(threads)
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
    int64_t *h = hist + (size_t)t * (size_t)buckets;
    for (int pass = 0; pass < passes; pass++) {
      int shift = a->shift + pass * width;
      memset(h, 0, sizeof *h * (size_t)buckets);
      for (int64_t i = lo; i < hi; i++)
        h[(a->key[i] >> shift) & mask]++;
#pragma omp barrier
#pragma omp single
      {
        int64_t sum = 0;
        skip = 0;
        for (int64_t d = 0; d < buckets; d++)
          for (int u = 0; u < nt; u++) {
            int64_t c = hist[(size_t)u * (size_t)buckets + (size_t)d];
            skip |= c == n;
            hist[(size_t)u * (size_t)buckets + (size_t)d] = sum;
            sum += c;
          }
      }
      if (!skip) {
        for (int64_t i = lo; i < hi; i++) {
          int64_t o = h[(a->key[i] >> shift) & mask]++;
          a->key2[o] = a->key[i];
          if (a->pos)
            a->pos2[o] = a->pos[i];
        }
#pragma omp barrier
#pragma omp single
        {
          uint64_t *k = a->key;
          int64_t *p = a->pos;
          a->key = a->key2, a->key2 = k;
          a->pos = a->pos2, a->pos2 = p;
        }
      }
    }
  }
}

/* Cuts the sorted keys into runs: run_start gets the first entry of each run and n at the end. */
static tbe_status find_runs(ref_transpose *tr, int threads)
{
  int64_t n = tr->n;
  int64_t *count = calloc((size_t)threads + 1, sizeof *count);
  if (!count)
    return tbe_error(TBE_ENOMEM, "transpose", -1, "cannot allocate the run counters");
  int64_t runs = 0;
#pragma omp parallel num_threads(threads)
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t lo = n * t / nt, hi = n * (t + 1) / nt, c = 0;
    for (int64_t i = lo; i < hi; i++)
      c += i == 0 || tr->key[i] != tr->key[i - 1];
    count[t + 1] = c;
#pragma omp barrier
#pragma omp single
    {
      for (int u = 0; u < nt; u++)
        count[u + 1] += count[u];
      runs = count[nt];
      tr->run_start = malloc(sizeof *tr->run_start * (size_t)(runs + 1));
    }
    if (tr->run_start) {
      int64_t r = count[t];
      for (int64_t i = lo; i < hi; i++)
        if (i == 0 || tr->key[i] != tr->key[i - 1])
          tr->run_start[r++] = i;
    }
  }
  free(count);
  if (!tr->run_start)
    return tbe_error(TBE_ENOMEM, "transpose", -1, "cannot allocate %lld runs", (long long)runs);
  tr->run_start[runs] = n;
  tr->num_runs = runs;
  return tbe_ok();
}

/* The number of significant bits of x (0 for 0). */
static int bit_length(uint64_t x)
{
  int k = 0;
  while (x >> k)
    k++;
  return k;
}

tbe_status ref_transpose_build(const tbe_batch *b, const tbe_layout *l, ref_transpose *tr)
{
  memset(tr, 0, sizeof *tr);
  int threads = b->N > REF_PAR_MIN ? omp_get_max_threads() : 1;
  tr->rows_cumsum = malloc(sizeof *tr->rows_cumsum * (size_t)(b->num_tables + 1));
  int64_t blocks = (l->total_B + BAG_BLOCK - 1) / BAG_BLOCK;
  int64_t *at = malloc(sizeof *at * (size_t)(blocks + 1));
  int64_t *bad = malloc(sizeof *bad * 2 * (size_t)(blocks + 1));
  if (!tr->rows_cumsum || !at || !bad) {
    free(at);
    free(bad);
    ref_transpose_free(tr);
    return tbe_error(TBE_ENOMEM, "transpose", -1, "cannot allocate the transpose's counters");
  }
  tr->rows_cumsum[0] = 0;
  for (int32_t j = 0; j < b->num_tables; j++)
    tr->rows_cumsum[j + 1] = tr->rows_cumsum[j] + b->E[j];

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t k = 0; k < blocks; k++)
    at[k + 1] = count_block(b, l, k, &bad[2 * k], &bad[2 * k + 1]);
  at[0] = 0;
  for (int64_t k = 0; k < blocks; k++) {
    int64_t bag = bad[2 * k], p = bad[2 * k + 1];
    if (bag >= 0 || p >= 0) {
      free(at);
      free(bad);
      ref_transpose_free(tr);
      if (bag >= 0)
        return tbe_error(TBE_EINVAL, "offsets", bag, "bag %lld's offsets are not within [0, N] "
                         "and nondecreasing: run the bounds check first", (long long)bag);
      return tbe_error(TBE_EINVAL, "indices", p, "position %lld holds an index outside its "
                       "table: run the bounds check first", (long long)p);
    }
    at[k + 1] += at[k];
  }
  free(bad);
  int64_t n = at[blocks];
  size_t m = (size_t)(n ? n : 1);
  int64_t total_rows = tr->rows_cumsum[b->num_tables];
  int key_bits = bit_length(total_rows > 0 ? (uint64_t)total_rows - 1 : 0);
  int pos_bits = bit_length(b->N > 1 ? (uint64_t)b->N - 1 : 1);
  int packed = key_bits + pos_bits <= 64;
  sort_arrays a = {ref_alloc_big(sizeof(uint64_t) * m), ref_alloc_big(sizeof(uint64_t) * m),
                   packed ? NULL : ref_alloc_big(sizeof(int64_t) * m),
                   packed ? NULL : ref_alloc_big(sizeof(int64_t) * m), packed ? pos_bits : 0};
  int32_t *bag_of_pos = ref_alloc_big(sizeof(int32_t) * (size_t)(b->N ? b->N : 1));
  int64_t *hist = malloc(sizeof *hist * (size_t)threads << RADIX_MAX_BITS);
  tr->n = n;
  tr->key = a.key;
  tr->pos = a.pos;
  tr->bag = ref_alloc_big(sizeof(int32_t) * m);
  if (!a.key || !a.key2 || (!packed && (!a.pos || !a.pos2)) || !bag_of_pos || !tr->bag ||
      !hist) {
    free(at);
    free(hist);
    free(a.key2);
    free(a.pos2);
    free(bag_of_pos);
    ref_transpose_free(tr);
    return tbe_error(TBE_ENOMEM, "transpose", -1, "cannot allocate the sort of %lld entries",
                     (long long)n);
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t k = 0; k < blocks; k++)
    fill_block(b, l, tr->rows_cumsum, k, at[k], &a, bag_of_pos);
  free(at);

  radix_sort(&a, n, key_bits, hist, threads);
  free(hist);
  tr->key = a.key;
  if (packed) { /* unpack: the spare buffer takes the positions */
    tr->pos = (int64_t *)a.key2;
    uint64_t mask = (UINT64_C(1) << pos_bits) - 1;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; i++) {
      tr->pos[i] = (int64_t)(tr->key[i] & mask);
      tr->key[i] >>= pos_bits;
    }
  } else {
    free(a.key2);
    free(a.pos2);
    tr->pos = a.pos;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; i++)
    tr->bag[i] = bag_of_pos[tr->pos[i]];
  free(bag_of_pos);
  tbe_status st = find_runs(tr, threads);
  if (st.code)
    ref_transpose_free(tr);
  return st;
}
