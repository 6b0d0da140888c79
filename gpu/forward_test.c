/* forward_test.c: the GPU forward against the reference, bit for bit, on every case of the
 * given .cases files and under every forward configuration (bags per program, gather width,
 * fused bounds check); SKIPs (exit 77) without a GPU. Not the harness's `run` (no database).
 * Weights of pruned positions are made non-finite first (poison_pruned_weights).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bounds.h"
#include "case.h"
#include "compare.h"
#include "forward.h"
#include "forward_small.h"
#include <math.h>
#include "tbe_gpu.h"

static const gpu_fwd_config configs[] = {
  {0, 0, 0, GPU_SMALL_OFF}, {1, 4, 0, GPU_SMALL_OFF}, {2, 8, 0, GPU_SMALL_OFF},
  {4, 4, 0, GPU_SMALL_OFF}, {1, 8, 1, GPU_SMALL_OFF}, {2, 4, 1, GPU_SMALL_OFF},
  {4, 8, 1, GPU_SMALL_OFF}, {0, 0, 1, GPU_SMALL_OFF}, {0, 0, 0, GPU_SMALL_ON},
  {2, 4, 1, GPU_SMALL_ON},
};

static int64_t model_total, model_equal; /* small-table elements, and those equal to the model */
static double worst_small_ratio;

/* An output where some features took the small-table path: their elements are held to the
 * exact sum within the tensor-core bound (and counted against the model), the others to the
 * reference bit for bit. Returns 1 on failure with the reason in what. */
static int compare_small(const tbe_batch *b, const tbe_layout *l, const void *ref_out,
                         const gpu_fwd_result *g, char *what, size_t n)
{
  size_t elems = (size_t)l->out_elems;
  unsigned char *is_small = calloc(elems + 1, 1);
  float *model = malloc(sizeof(float) * (elems + 1));
  double *exact = malloc(sizeof(double) * (elems + 1)), *bound = malloc(sizeof(double) * (elems + 1));
  for (int64_t i = 0; i < l->total_B; i++)
    if (g->small_mask[l->bag_feature[i]])
      memset(is_small + l->bag_out[i], 1, (size_t)b->D[b->feature_table_map[l->bag_feature[i]]]);
  ref_forward_small_model(b, l, g->small_mask, model);
  ref_forward_exact_tc(b, l, g->small_mask, exact, bound);
  const float *got = g->out, *want = ref_out;
  int64_t generic_bad = 0, bound_bad = 0, first = -1;
  for (size_t i = 0; i < elems; i++) {
    if (!is_small[i]) {
      if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && !(isnan(got[i]) && isnan(want[i]))) {
        generic_bad++;
        if (first < 0)
          first = (int64_t)i;
      }
      continue;
    }
    double err = fabs((double)got[i] - exact[i]);
    if (!(err <= bound[i])) {
      bound_bad++;
      if (first < 0)
        first = (int64_t)i;
    }
    if (bound[i] > 0 && err / bound[i] > worst_small_ratio)
      worst_small_ratio = err / bound[i];
    model_total++;
    model_equal += memcmp(&got[i], &model[i], sizeof(float)) == 0;
  }
  if (generic_bad || bound_bad)
    snprintf(what, n, "small-table output: %lld generic elements differ, %lld small ones outside "
             "the bound; first at %lld: gpu %.9g exact %.9g bound %.3g",
             (long long)generic_bad, (long long)bound_bad, (long long)first,
             (double)got[first], exact[first], bound[first]);
  free(is_small);
  free(model);
  free(exact);
  free(bound);
  return generic_bad || bound_bad;
}

/* Compares one GPU run with the reference's results; prints and returns the failures. */
static int compare_run(const char *canon, const gpu_fwd_config *c, const tbe_batch *ref,
                       const tbe_layout *l, const void *ref_out, tbe_status ref_st,
                       int64_t ref_warn, const gpu_fwd_result *g)
{
  int fail = 0;
  char what[1024] = "";
  if (g->bounds.code != ref_st.code || g->bounds.bag != ref_st.bag ||
      g->bounds.position != ref_st.position || g->bounds.value != ref_st.value) {
    snprintf(what, sizeof what, "status: gpu '%s', ref '%s'", g->bounds.message, ref_st.message);
    fail++;
  } else if (g->warnings != ref_warn) {
    snprintf(what, sizeof what, "warnings: gpu %lld, ref %lld", (long long)g->warnings,
             (long long)ref_warn);
    fail++;
  } else if (g->guard_errors) {
    snprintf(what, sizeof what, "%d bytes written outside the output", g->guard_errors);
    fail++;
  } else if (ref_st.code == TBE_OK) {
    cmp_result r;
    cmp_init(&r, CMP_BITWISE, 1);
    cmp_bitwise_int(&r, ref->itype, ref->offsets, g->offsets, l->total_B + 1);
    cmp_bitwise_int(&r, ref->itype, ref->indices, g->indices, ref->N);
    if (r.violations) {
      snprintf(what, sizeof what, "repaired offsets/indices differ in %lld places",
               (long long)r.violations);
      fail++;
    }
    cmp_free(&r);
    if (g->small_features)
      fail += compare_small(ref, l, ref_out, g, what, sizeof what);
    else {
      cmp_init(&r, CMP_BITWISE, 1);
      cmp_bitwise(&r, ref->out_dtype, ref_out, g->out, l->out_elems);
      if (r.violations) {
        snprintf(what, sizeof what,
                 "output: %lld of %lld elements differ, max_ulp %lld, first at %lld: gpu %.9g "
                 "ref %.9g",
                 (long long)r.violations, (long long)r.elements, (long long)r.max_ulp,
                 (long long)r.first[0].index, r.first[0].got, r.first[0].expected);
        fail++;
      }
      cmp_free(&r);
    }
  }
  printf("%-4s bags=%d width=%d fused=%d small=%d %8.3f ms  %s%s%s\n", fail ? "FAIL" : "pass",
         c->bags, c->width, c->fused_bounds, g->small_features, g->ms, canon,
         fail ? "\n     " : "", what);
  return fail;
}

/* Pruned positions (index -1) add nothing whatever their weight (TBE_SEMANTICS.md 3), but the
 * generator's weights are finite, and a finite weight times a zero row adds +0, which hides a
 * kernel that uses them. So their weights become +Inf, -Inf and NaN in turn: such a kernel now
 * shows NaN. Same input for the GPU and the reference. */
static void poison_pruned_weights(tbe_batch *b)
{
  static const float special[3] = {INFINITY, -INFINITY, NAN};
  int k = 0;
  for (int64_t p = 0; b->per_sample_weights && p < b->N; p++)
    if (tbe_iget(b->indices, b->itype, p) == -1)
      b->per_sample_weights[p] = special[k++ % 3];
}

static int run_case(const char *text, int nconfigs, int *failures)
{
  tbe_case *c;
  tbe_status st = case_parse(text, &c);
  if (st.code != TBE_OK) {
    fprintf(stderr, "bad case '%s': %s\n", text, st.message);
    return 2;
  }
  char canon[4096];
  case_format(c, canon, sizeof canon);
  tbe_batch b;
  st = case_generate(c, &b);
  tbe_layout l;
  if (st.code == TBE_OK)
    st = tbe_layout_init(&l, &b);
  if (st.code != TBE_OK) {
    fprintf(stderr, "%s: %s\n", canon, st.message);
    case_free(c);
    return 2;
  }
  poison_pruned_weights(&b);
  gpu_fwd_result g[sizeof configs / sizeof configs[0]];
  for (int i = 0; i < nconfigs; i++) {
    st = gpu_run_forward(&b, &l, case_bounds(c), &configs[i], &g[i]);
    if (st.code != TBE_OK) {
      fprintf(stderr, "%s: gpu: %s\n", canon, st.message);
      return st.code == TBE_ENODEV ? 77 : 3;
    }
  }
  int64_t warn = 0;
  void *out = malloc(tbe_dtype_size(b.out_dtype) * (size_t)l.out_elems + 1);
  tbe_status ref_st = ref_bounds_check(&b, &l, case_bounds(c), &warn);
  if (ref_st.code == TBE_OK)
    st = ref_forward(&b, &l, out);
  for (int i = 0; i < nconfigs; i++) {
    *failures += compare_run(canon, &configs[i], &b, &l, out, ref_st, warn, &g[i]);
    gpu_fwd_result_free(&g[i]);
  }
  free(out);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  case_free(c);
  return 0;
}

int main(int argc, char **argv)
{
  char desc[256];
  tbe_status st = gpu_probe(desc, sizeof desc);
  if (st.code == TBE_ENODEV) {
    printf("SKIP: %s\n", st.message);
    return 77;
  }
  int nconfigs = (int)(sizeof configs / sizeof configs[0]);
  int first = 1;
  if (argc > 1 && strcmp(argv[1], "--default-config") == 0) {
    nconfigs = 1;
    first = 2;
  }
  if (first >= argc) {
    fputs("usage: gpu_forward_test [--default-config] CASEFILE...\n", stderr);
    return 2;
  }
  int failures = 0, cases = 0;
  for (int a = first; a < argc; a++) {
    case_list cl;
    st = case_file_read(argv[a], &cl);
    if (st.code != TBE_OK) {
      fprintf(stderr, "%s\n", st.message);
      return 2;
    }
    for (int i = 0; i < cl.count; i++, cases++) {
      int rc = run_case(cl.lines[i].text, nconfigs, &failures);
      if (rc)
        return rc;
    }
    case_list_free(&cl);
  }
  printf("gpu forward vs reference: %d cases x %d configurations, %d failures (%s)\n", cases,
         nconfigs, failures, desc);
  printf("small-table path: %lld elements, %lld (%.2f%%) equal to the tensor-core model bit for "
         "bit, worst error/bound %.3g\n",
         (long long)model_total, (long long)model_equal,
         model_total ? 100.0 * (double)model_equal / (double)model_total : 0.0,
         worst_small_ratio);
  return failures ? 1 : 0;
}
