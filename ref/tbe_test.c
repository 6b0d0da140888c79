/* tbe_test.c: structural validation of tbe_batch and its layout: every inconsistency is a
 * status naming the field, and the VBE layout matches TBE_SEMANTICS.md section 1's example.
 */
#include <string.h>

#include "tbe.h"
#include "test_batch.h"
#include "test_util.h"

static const int64_t E2[] = {10, 20};
static const int32_t D48[] = {4, 8};
static const int64_t idx0[] = {0};

static tb_spec base_spec(const int64_t *offsets)
{
  tb_spec s = {
      .num_tables = 2,
      .E = E2,
      .D = D48,
      .T = 2,
      .B = 1,
      .itype = TBE_I64,
      .N = 1,
      .indices = idx0,
      .offsets = offsets,
  };
  return s;
}

/* Builds spec, applies `mutate`, validates, and checks the code and field. */
static void expect(const char *what, tb_spec s, void (*mutate)(tbe_batch *), tbe_code code,
                   const char *field)
{
  tbe_batch b = tb_build(&s);
  if (mutate)
    mutate(&b);
  tbe_status st = tbe_batch_validate(&b);
  CHECK(st.code == code, "%s: code %d (%s), want %d", what, st.code, st.message, code);
  if (field)
    CHECK(strcmp(st.field, field) == 0, "%s: field '%s', want '%s' (%s)", what, st.field, field,
          st.message);
  tbe_batch_free(&b);
}

static void set_d0(tbe_batch *b) { b->D[0] = 0; }
static void set_d_big(tbe_batch *b) { b->D[1] = 2049; }
static void set_map(tbe_batch *b) { b->feature_table_map[1] = 2; }
static void set_mean_weighted(tbe_batch *b)
{
  b->pool = TBE_POOL_MEAN;
  b->per_sample_weights = calloc(1, sizeof(float));
}
static void set_none_mixed(tbe_batch *b) { b->pool = TBE_POOL_NONE; }
static void set_none_weighted(tbe_batch *b)
{
  b->pool = TBE_POOL_NONE;
  b->D[1] = 4;
  b->table_offset[2] = 10 * 4 + 20 * 4;
  b->per_sample_weights = calloc(1, sizeof(float));
}
static void set_table_offset(tbe_batch *b) { b->table_offset[2] += 1; }
static void set_i32_big(tbe_batch *b)
{
  b->itype = TBE_I32;
  b->N = (int64_t)INT32_MAX + 1;
}
static void set_neg_B(tbe_batch *b) { b->B = -1; }
static void set_huge_E(tbe_batch *b)
{
  b->E[0] = INT64_C(1) << 40;
  b->D[0] = 2048;
  b->table_offset[1] = b->E[0] * b->D[0];
  b->table_offset[2] = b->table_offset[1] + b->E[1] * b->D[1];
}
static void set_E0(tbe_batch *b)
{
  b->E[1] = 0;
  b->table_offset[2] = b->table_offset[1];
}
static void set_i32_big_E(tbe_batch *b)
{
  b->itype = TBE_I32;
  b->E[1] = (int64_t)INT32_MAX + 1;
  b->table_offset[2] = b->table_offset[1] + b->E[1] * b->D[1];
}
static void set_vbe_neg(tbe_batch *b)
{
  b->R = 1;
  b->B_vbe = malloc(2 * sizeof(int32_t));
  b->B_vbe[0] = 1;
  b->B_vbe[1] = -3;
}

static void test_validate(void)
{
  static const int64_t off[] = {0, 1, 1};
  tb_spec s = base_spec(off);
  expect("valid", s, NULL, TBE_OK, NULL);
  expect("D=0", s, set_d0, TBE_EINVAL, "D");
  expect("D=2049", s, set_d_big, TBE_EINVAL, "D");
  expect("map out of range", s, set_map, TBE_EINVAL, "feature_table_map");
  expect("MEAN weighted", s, set_mean_weighted, TBE_EINVAL, "per_sample_weights");
  expect("NONE mixed D", s, set_none_mixed, TBE_EINVAL, "D");
  expect("NONE weighted", s, set_none_weighted, TBE_EINVAL, "per_sample_weights");
  expect("table_offset", s, set_table_offset, TBE_EINVAL, "table_offset");
  expect("int32 positions overflow", s, set_i32_big, TBE_EINVAL, "indices");
  expect("int32 rows overflow", s, set_i32_big_E, TBE_EINVAL, "E");
  expect("E=0", s, set_E0, TBE_EINVAL, "E");
  tbe_batch b = tb_build(&s);
  set_E0(&b);
  tbe_status st = tbe_batch_validate(&b);
  CHECK(strstr(st.message, "table 1") != NULL, "E=0 does not name table 1: %s", st.message);
  tbe_batch_free(&b);
  expect("negative B", s, set_neg_B, TBE_EINVAL, "B");
  expect("weights too big", s, set_huge_E, TBE_ENOMEM, "weights");
  expect("negative VBE batch", s, set_vbe_neg, TBE_EINVAL, "B_vbe");
}

static void test_vbe_layout(void)
{
  /* TBE_SEMANTICS.md section 1: D = (4, 8), R = 2, B = [[1,2],[3,1]]: blocks (r0,f0) 1x4,
   * (r0,f1) 3x8, (r1,f0) 2x4, (r1,f1) 1x8 start at 0, 4, 28, 36; 44 values. */
  static const int32_t Bv[] = {1, 2, 3, 1};
  static const int64_t off[] = {0, 0, 0, 0, 0, 0, 0, 1};
  tb_spec s = base_spec(off);
  s.R = 2;
  s.B_vbe = Bv;
  tbe_batch b = tb_build(&s);
  tbe_status st = tbe_batch_validate(&b);
  CHECK(st.code == TBE_OK, "vbe validate: %s", st.message);
  tbe_layout l;
  st = tbe_layout_init(&l, &b);
  CHECK(st.code == TBE_OK, "layout: %s", st.message);
  CHECK(l.total_B == 7, "total_B %lld", (long long)l.total_B);
  CHECK(l.out_elems == 44, "out_elems %lld", (long long)l.out_elems);
  /* bags: f0: r0 s0 | r1 s0 s1 ; f1: r0 s0 s1 s2 | r1 s0 */
  static const int64_t want[] = {0, 28, 32, 4, 12, 20, 36};
  for (int i = 0; i < 7; i++)
    CHECK(l.bag_out[i] == want[i], "bag %d starts at %lld, want %lld", i,
          (long long)l.bag_out[i], (long long)want[i]);
  CHECK(l.B_offsets[1] == 3 && l.B_offsets[2] == 7, "B_offsets");
  CHECK(l.D_offsets[1] == 4 && l.total_D == 12, "D_offsets");
  tbe_layout_free(&l);
  tbe_batch_free(&b);
}

static void test_fixed_layout(void)
{
  static const int64_t off[] = {0, 0, 0, 0, 0, 0, 1};
  tb_spec s = base_spec(off);
  s.B = 3;
  tbe_batch b = tb_build(&s);
  tbe_layout l;
  CHECK(tbe_layout_init(&l, &b).code == TBE_OK, "layout");
  /* feature-major bags; output [B, total_D] row-major, feature 1 at column 4 */
  static const int64_t want[] = {0, 12, 24, 4, 16, 28};
  for (int i = 0; i < 6; i++)
    CHECK(l.bag_out[i] == want[i], "bag %d at %lld", i, (long long)l.bag_out[i]);
  CHECK(l.out_elems == 36, "out_elems");
  tbe_layout_free(&l);
  tbe_batch_free(&b);
}

int main(void)
{
  test_validate();
  test_vbe_layout();
  test_fixed_layout();
  return TEST_MAIN_RESULT();
}
