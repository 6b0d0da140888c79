/* import_test.c: a batch exported as .npy files imports back into the same bytes (fixed and VBE,
 * int32 and int64, weighted), with optional files derived, a stable identity, and clear errors
 * for a missing or inconsistent file. Not the .npy reader's tests (npy_test.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "case.h"
#include "gen.h"
#include "export.h"
#include "import.h"
#include "npy.h"
#include "test_tmpdir.h"
#include "test_util.h"

static char tmp[256];

static const import_options defaults = {TBE_POOL_SUM, TBE_FP32, TBE_BOUNDS_WARNING};

static int same(const void *a, const void *b, size_t n) { return n == 0 || !memcmp(a, b, n); }

/* Exports text to dir/name, imports it, and compares with a fresh generation of the case. */
static void round_trip(const char *text, const char *name)
{
  char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", tmp, name);
  tbe_status s = export_case(text, dir);
  CHECK(s.code == TBE_OK, "export '%s': %s", text, s.message);
  tbe_case *c;
  tbe_batch want, got;
  if (case_parse(text, &c).code != TBE_OK || case_generate(c, &want).code != TBE_OK) {
    CHECK(0, "cannot generate '%s'", text);
    return;
  }
  char canon[160];
  import_options o = {want.pool, want.out_dtype, case_bounds(c)};
  s = import_dir(dir, &o, &got, canon, sizeof canon);
  CHECK(s.code == TBE_OK, "import '%s': %s", text, s.message);
  if (s.code == TBE_OK) {
    size_t isz = tbe_itype_size(want.itype);
    int64_t nt = want.num_tables, total_B = tbe_total_B(&want);
    CHECK(got.num_tables == nt && got.T == want.T && got.B == want.B && got.R == want.R &&
              got.N == want.N && got.itype == want.itype && got.wdtype == want.wdtype,
          "'%s': shapes differ", text);
    CHECK(same(got.E, want.E, sizeof(int64_t) * (size_t)nt) &&
              same(got.D, want.D, sizeof(int32_t) * (size_t)nt) &&
              same(got.table_offset, want.table_offset, sizeof(int64_t) * (size_t)(nt + 1)) &&
              same(got.feature_table_map, want.feature_table_map,
                   sizeof(int32_t) * (size_t)want.T) &&
              same(got.weights, want.weights,
                   tbe_dtype_size(want.wdtype) * (size_t)want.table_offset[nt]) &&
              same(got.indices, want.indices, isz * (size_t)want.N) &&
              same(got.offsets, want.offsets, isz * (size_t)(total_B + 1)),
          "'%s': arrays differ", text);
    CHECK(!want.R || same(got.B_vbe, want.B_vbe, sizeof(int32_t) * (size_t)(want.T * want.R)),
          "'%s': B_vbe differs", text);
    CHECK(!want.per_sample_weights == !got.per_sample_weights &&
              (!want.per_sample_weights ||
               same(got.per_sample_weights, want.per_sample_weights, 4 * (size_t)want.N)),
          "'%s': per-sample weights differ", text);
    CHECK(!strncmp(canon, "import digest=", 14), "identity: %s", canon);
    tbe_batch_free(&got);
  }
  tbe_batch_free(&want);
  case_free(c);
}

static void remove_file(const char *dir, const char *name)
{
  char p[600];
  snprintf(p, sizeof p, "%s/%s/%s", tmp, dir, name);
  CHECK(unlink(p) == 0, "cannot remove %s", p);
}

static tbe_status import_named(const char *name, const import_options *o, char *canon)
{
  char dir[512];
  tbe_batch b;
  snprintf(dir, sizeof dir, "%s/%s", tmp, name);
  tbe_status s = import_dir(dir, o, &b, canon, 160);
  if (s.code == TBE_OK)
    tbe_batch_free(&b);
  return s;
}

static void test_identity_and_errors(void)
{
  char a[160], b[160], c[160];
  round_trip("T=2 B=6 E=30,40 D=4,8 L=2", "plain");
  CHECK(import_named("plain", &defaults, a).code == TBE_OK &&
            import_named("plain", &defaults, b).code == TBE_OK && !strcmp(a, b),
        "the same files gave two identities: %s / %s", a, b);
  import_options mean = defaults;
  mean.pool = TBE_POOL_MEAN;
  CHECK(import_named("plain", &mean, c).code == TBE_OK && strcmp(a, c) != 0,
        "pooling is not part of the identity");

  /* the optional files are derived when absent, to the same batch */
  remove_file("plain", "table_offset.npy");
  remove_file("plain", "feature_table_map.npy");
  CHECK(import_named("plain", &defaults, b).code == TBE_OK, "without the optional files");

  remove_file("plain", "indices.npy");
  tbe_status s = import_named("plain", &defaults, b);
  CHECK(s.code == TBE_EINVAL && strstr(s.message, "indices.npy is missing"), "missing: %s",
        s.message);

  round_trip("B=4 L=2 idx=int32", "mixed");
  char p[600];
  snprintf(p, sizeof p, "%s/mixed/offsets.npy", tmp);
  int64_t offs[5] = {0, 2, 4, 6, 8}, shape[1] = {5};
  CHECK(npy_write(p, NPY_I8, 1, shape, offs).code == TBE_OK, "cannot rewrite offsets.npy");
  s = import_named("mixed", &defaults, b);
  CHECK(s.code == TBE_EINVAL && strstr(s.message, "both"), "mixed index dtypes: %s", s.message);

  /* a table without rows: a WARNING repair to row 0 would read past the table */
  round_trip("T=2 B=2 E=5,6 D=4 L=2", "empty_table");
  snprintf(p, sizeof p, "%s/empty_table/E.npy", tmp);
  int64_t rows[2] = {5, 0}, two[1] = {2};
  CHECK(npy_write(p, NPY_I8, 1, two, rows).code == TBE_OK, "cannot rewrite E.npy");
  s = import_named("empty_table", &defaults, b);
  CHECK(s.code == TBE_EINVAL && strstr(s.message, "E[1] is 0"), "E = 0: %s", s.message);

  s = import_named("no-such-dir", &defaults, b);
  CHECK(s.code == TBE_EINVAL && strstr(s.message, "not a directory"), "no dir: %s", s.message);
  import_options bad_pool = defaults;
  bad_pool.pool = TBE_POOL_MEAN;
  round_trip("B=4 L=2 weighted=1", "weighted");
  s = import_named("weighted", &bad_pool, b);
  CHECK(s.code == TBE_EINVAL && strstr(s.message, "MEAN"), "MEAN with weights: %s", s.message);
}

int main(void)
{
  test_tmpdir_make(tmp, sizeof tmp, "import_test");
  round_trip("T=3 B=7 E=100,5 D=16,3 map=0,1,0 L=0..9 weighted=1 wdtype=fp16 idx=int32 "
             "invalid=0.1 corrupt=negative", "fixed");
  round_trip("T=2 vbe=1 R=3 B=0..4 E=20 D=8,4 L=1..5 wdtype=bf16 out=bf16", "vbe");
  round_trip("T=2 B=3 E=10 D=4 L=3 pool=none", "none");
  test_identity_and_errors();
  test_tmpdir_done(tmp, test_failures);
  return TEST_MAIN_RESULT();
}
