/* bounds_test.c: the bounds-check rules of TBE_SEMANTICS.md section 2 one by one, the worked
 * example, FATAL's first offender, and the prefix-max repair against a direct sequential one.
 */
#include <omp.h>
#include <string.h>

#include "bounds.h"
#include "test_batch.h"
#include "test_util.h"

/* T=2, B=3, E = (10, 20), D = 1: the worked example's shape. */
static tbe_batch example(const int64_t *offsets, const int64_t *indices, int64_t N,
                         tbe_itype itype)
{
  static const int64_t E[] = {10, 20};
  static const int32_t D[] = {1, 1};
  tb_spec s = {
      .num_tables = 2,
      .E = E,
      .D = D,
      .T = 2,
      .B = 3,
      .itype = itype,
      .N = N,
      .indices = indices,
      .offsets = offsets,
  };
  return tb_build(&s);
}

static tbe_status check(tbe_batch *b, tbe_bounds_mode mode, int64_t *warnings)
{
  tbe_layout l;
  tbe_status st = tbe_layout_init(&l, b);
  if (st.code == TBE_OK)
    st = ref_bounds_check(b, &l, mode, warnings);
  tbe_layout_free(&l);
  return st;
}

static void expect_arrays(const tbe_batch *b, const int64_t *off, const int64_t *idx,
                          const char *what)
{
  for (int i = 0; i <= 6; i++)
    CHECK(tbe_iget(b->offsets, b->itype, i) == off[i], "%s: offsets[%d] = %lld, want %lld", what,
          i, (long long)tbe_iget(b->offsets, b->itype, i), (long long)off[i]);
  for (int64_t p = 0; p < b->N; p++)
    CHECK(tbe_iget(b->indices, b->itype, p) == idx[p], "%s: indices[%lld] = %lld, want %lld",
          what, (long long)p, (long long)tbe_iget(b->indices, b->itype, p), (long long)idx[p]);
}

static const int64_t ex_off[] = {0, 3, 2, 6, 8, 7, 13};
static const int64_t ex_idx[] = {1, 10, -5, 2, 3, 4, -1, 19, 25, 0, 5};

static void test_worked_example(void)
{
  static const int64_t want_off[] = {0, 3, 3, 6, 8, 8, 11};
  static const int64_t want_idx[] = {1, 0, 0, 2, 3, 4, -1, 19, 0, 0, 5};
  for (int it = 0; it < 2; it++) {
    tbe_itype itype = it ? TBE_I64 : TBE_I32;
    tbe_batch b = example(ex_off, ex_idx, 11, itype);
    int64_t w = -1;
    tbe_status st = check(&b, TBE_BOUNDS_WARNING, &w);
    CHECK(st.code == TBE_OK, "warning: %s", st.message);
    CHECK(w == 6, "counter %lld, want 6", (long long)w);
    expect_arrays(&b, want_off, want_idx, "warning");
    tbe_batch_free(&b);

    b = example(ex_off, ex_idx, 11, itype);
    st = check(&b, TBE_BOUNDS_IGNORE, &w);
    CHECK(st.code == TBE_OK && w == 0, "ignore: counter %lld", (long long)w);
    expect_arrays(&b, want_off, want_idx, "ignore");
    tbe_batch_free(&b);

    b = example(ex_off, ex_idx, 11, itype);
    st = check(&b, TBE_BOUNDS_FATAL, &w);
    CHECK(st.code == TBE_EBOUNDS && st.bag == 1 && st.feature == 0 &&
              strcmp(st.field, "offsets") == 0,
          "fatal: code %d bag %lld feature %lld field %s", st.code, (long long)st.bag,
          (long long)st.feature, st.field);
    expect_arrays(&b, ex_off, ex_idx, "fatal repairs nothing");
    tbe_batch_free(&b);

    b = example(ex_off, ex_idx, 11, itype);
    st = check(&b, TBE_BOUNDS_NONE, &w);
    CHECK(st.code == TBE_OK && w == 0, "none");
    expect_arrays(&b, ex_off, ex_idx, "none changes nothing");
    tbe_batch_free(&b);
  }
}

/* One rule at a time on an otherwise valid batch: offsets in, repaired offsets and counter out. */
static void rule(const char *what, const int64_t *off, const int64_t *idx, const int64_t *want_off,
                 const int64_t *want_idx, int64_t want_w, int64_t fatal_bag, int64_t fatal_pos)
{
  tbe_batch b = example(off, idx, 6, TBE_I64);
  int64_t w;
  tbe_status st = check(&b, TBE_BOUNDS_WARNING, &w);
  CHECK(st.code == TBE_OK && w == want_w, "%s: counter %lld, want %lld", what, (long long)w,
        (long long)want_w);
  expect_arrays(&b, want_off, want_idx, what);
  tbe_batch_free(&b);
  b = example(off, idx, 6, TBE_I64);
  st = check(&b, TBE_BOUNDS_FATAL, &w);
  if (fatal_bag < 0)
    CHECK(st.code == TBE_OK, "%s: FATAL should pass: %s", what, st.message);
  else
    CHECK(st.code == TBE_EBOUNDS && st.bag == fatal_bag && st.position == fatal_pos,
          "%s: FATAL names bag %lld position %lld (%s), want bag %lld position %lld", what,
          (long long)st.bag, (long long)st.position, st.message, (long long)fatal_bag,
          (long long)fatal_pos);
  tbe_batch_free(&b);
}

static void test_rules(void)
{
  static const int64_t ok_idx[] = {0, 1, 2, 3, 4, 5};
  static const int64_t valid[] = {0, 1, 2, 3, 4, 5, 6};
  rule("valid", valid, ok_idx, valid, ok_idx, 0, -1, -1);
  static const int64_t neg[] = {-2, 1, 2, 3, 4, 5, 6};
  static const int64_t neg_r[] = {0, 1, 2, 3, 4, 5, 6};
  rule("negative start", neg, ok_idx, neg_r, ok_idx, 1, 0, 0);
  static const int64_t dec[] = {0, 4, 2, 3, 4, 5, 6};
  static const int64_t dec_r[] = {0, 4, 4, 4, 4, 5, 6};
  rule("decreasing", dec, ok_idx, dec_r, ok_idx, 1, 1, 1);
  static const int64_t past[] = {0, 1, 9, 3, 4, 5, 6};
  static const int64_t past_r[] = {0, 1, 6, 6, 6, 6, 6};
  /* bag 1 ends past N and bag 2 starts past its end */
  rule("past the end", past, ok_idx, past_r, ok_idx, 2, 1, 1);
  static const int64_t last[] = {0, 1, 2, 3, 4, 5, 7};
  rule("wrong last offset", last, ok_idx, valid, ok_idx, 1, 6, 6);
  static const int64_t last_short[] = {0, 1, 2, 3, 4, 5, 5};
  rule("short last offset", last_short, ok_idx, valid, ok_idx, 1, 6, 6);
  static const int64_t bad_idx[] = {0, 10, -2, -1, 20, 19};
  static const int64_t bad_idx_r[] = {0, 0, 0, -1, 0, 19};
  /* feature 0 (E=10) holds positions 0-2, feature 1 (E=20) positions 3-5; FATAL names the
   * lowest position, 1, in bag 1 */
  rule("invalid indices", valid, bad_idx, valid, bad_idx_r, 3, 1, 1);
  rule("offsets before indices", last, bad_idx, valid, bad_idx_r, 4, 6, 6);
}

/* Direct sequential repair: each bag in order gets start' = the previous end' (or
 * clamp(start, 0, N) for the first) and end' = clamp(end, start', N); bad bags and invalid
 * indices are counted by their definitions. */
static int64_t direct_repair(int64_t *o, int64_t total_B, int64_t N, int64_t *idx, int64_t E)
{
  int64_t w = 0, s = o[0] < 0 ? 0 : o[0] > N ? N : o[0];
  for (int64_t i = 0; i < total_B; i++) {
    int64_t start = o[i], end = i == total_B - 1 ? N : o[i + 1];
    w += start < 0 || start > end || end > N;
  }
  w += o[total_B] != N;
  o[0] = s;
  for (int64_t i = 0; i < total_B; i++) {
    int64_t e = i == total_B - 1 ? N : o[i + 1];
    e = e < s ? s : e > N ? N : e;
    o[i + 1] = e;
    s = e;
  }
  o[total_B] = N;
  for (int64_t p = o[0]; p < N; p++)
    if (idx[p] != -1 && (idx[p] < 0 || idx[p] >= E)) {
      idx[p] = 0;
      w++;
    }
  return w;
}

static uint64_t rng_state = 88172645463325252ull;
static int64_t rnd(int64_t n)
{
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (int64_t)(rng_state % (uint64_t)n);
}

static void test_repair_vs_direct(void)
{
  enum { TOTAL = 64, MAXN = 200 };
  static const int64_t E[] = {50};
  static const int32_t D[] = {1};
  int64_t off[TOTAL + 1], idx[MAXN], want_off[TOTAL + 1], want_idx[MAXN];
  for (int trial = 0; trial < 3000; trial++) {
    int64_t B = 1 + rnd(TOTAL), N = rnd(MAXN);
    off[0] = 0;
    for (int64_t i = 1; i <= B; i++)
      off[i] = off[i - 1] + rnd(5);
    for (int64_t i = 0; i <= B; i++) /* corrupt some offsets at random */
      if (rnd(8) == 0)
        off[i] = rnd(2 * MAXN + 10) - MAXN / 2;
    for (int64_t p = 0; p < N; p++)
      idx[p] = rnd(10) == 0 ? rnd(120) - 60 : rnd(50);
    memcpy(want_off, off, sizeof off);
    memcpy(want_idx, idx, sizeof idx);
    int64_t want_w = direct_repair(want_off, B, N, want_idx, 50);
    tb_spec s = {
        .num_tables = 1,
        .E = E,
        .D = D,
        .T = 1,
        .B = (int32_t)B,
        .itype = trial & 1 ? TBE_I32 : TBE_I64,
        .N = N,
        .indices = idx,
        .offsets = off,
    };
    tbe_batch b = tb_build(&s);
    omp_set_num_threads(1 + (trial & 2) / 2);
    int64_t w;
    tbe_status st = check(&b, TBE_BOUNDS_WARNING, &w);
    CHECK(st.code == TBE_OK && w == want_w, "trial %d: counter %lld, want %lld", trial,
          (long long)w, (long long)want_w);
    for (int64_t i = 0; i <= B; i++)
      CHECK(tbe_iget(b.offsets, b.itype, i) == want_off[i], "trial %d: offsets[%lld]", trial,
            (long long)i);
    for (int64_t p = 0; p < N; p++)
      CHECK(tbe_iget(b.indices, b.itype, p) == want_idx[p], "trial %d: indices[%lld]", trial,
            (long long)p);
    tbe_batch_free(&b);
    if (test_failures > 20)
      return;
  }
}

int main(void)
{
  test_worked_example();
  test_rules();
  test_repair_vs_direct();
  return TEST_MAIN_RESULT();
}
