/* forward_test.c: the GPU forward against the reference on every case of the given .cases files
 * and under every forward configuration (bags per program, gather width, fused bounds check,
 * small-table path), through the harness's own engines and checks (harness/check/engine.c: one table
 * of metrics; generic features bit for bit, small-table ones to the tensor-core model bit for bit
 * and to the bound; every run twice, over two poisons); SKIPs (exit 77) without a GPU. Not the
 * harness's `run` (no database). Weights of pruned positions are made non-finite first.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"
#include "gen.h"
#include "engine.h"
#include "tbe_gpu.h"

#define W GPU_GATHER_WINDOW
#define DG GPU_GATHER_DIRECT
#define LN GPU_GATHER_LEAN
static const gpu_fwd_config configs[] = {
  {0, 0, 0, GPU_SMALL_OFF, 0}, {1, 4, 0, GPU_SMALL_OFF, W}, {2, 8, 0, GPU_SMALL_OFF, W},
  {4, 4, 0, GPU_SMALL_OFF, W}, {1, 8, 1, GPU_SMALL_OFF, W}, {2, 4, 1, GPU_SMALL_OFF, W},
  {4, 8, 1, GPU_SMALL_OFF, W}, {0, 0, 1, GPU_SMALL_OFF, 0}, {0, 0, 0, GPU_SMALL_ON, 0},
  {2, 4, 1, GPU_SMALL_ON, W}, {0, 4, 0, GPU_SMALL_OFF, DG}, {0, 8, 0, GPU_SMALL_OFF, DG},
  {0, 4, 1, GPU_SMALL_OFF, DG}, {0, 8, 1, GPU_SMALL_ON, DG}, {0, 0, 0, GPU_SMALL_OFF, LN},
  {1, 4, 0, GPU_SMALL_OFF, LN}, {4, 8, 1, GPU_SMALL_OFF, LN}, {2, 4, 1, GPU_SMALL_ON, LN},
};
#undef W
#undef DG
#undef LN

static int64_t model_elements, model_equal; /* small-table elements held to the model */
static double worst_small_ratio;

/* Prints one configuration's outcome; returns 1 if a check of the GPU failed. */
static int report(const char *canon, const gpu_fwd_config *c, const eng_case_result *r)
{
  const eng_check *bad = NULL;
  int small = 0;
  for (int i = 0; i < r->n_checks; i++) {
    const eng_check *k = &r->checks[i];
    if (k->engine != ENG_GPU)
      continue;
    if (!strcmp(k->path, "forward.small") && k->compared) {
      small = 1;
      if (!strcmp(k->baseline, "model")) {
        model_elements += k->cmp.elements;
        model_equal += k->cmp.exact;
      } else if (k->cmp.worst_bound_ratio > worst_small_ratio) {
        worst_small_ratio = k->cmp.worst_bound_ratio;
      }
    }
    if (!bad && (k->status == ENG_FAIL || k->status == ENG_ERROR))
      bad = k;
  }
  printf("%-4s bags=%d width=%d fused=%d small=%d gather=%d %8.3f ms  %s", bad ? "FAIL" : "pass",
         c->bags, c->width, c->fused_bounds, small, (int)c->gather, r->gpu_ms, canon);
  if (bad)
    printf("\n     %s %s: %s", bad->path, bad->output, bad->reason);
  printf("\n");
  return bad != NULL;
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

static int run_case(eng_ctx *x, const char *text, int nconfigs, int *failures)
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
  if (st.code != TBE_OK) {
    fprintf(stderr, "%s: %s\n", canon, st.message);
    case_free(c);
    return 2;
  }
  poison_pruned_weights(&b);
  eng_case_result r[sizeof configs / sizeof configs[0]];
  const double t0 = eng_now_ms();
  st = eng_run_batch_configs(x, &b, canon, case_bounds(c), configs, nconfigs, NULL, r);
  for (int i = 0; i < nconfigs; i++) {
    if (st.code == TBE_OK)
      *failures += report(canon, &configs[i], &r[i]);
    eng_case_result_free(&r[i]);
  }
  /* the wall time (the reference, its twins, every configuration and its checks): the big
   * cases take minutes, and a GPU host's call is bounded */
  printf("      %.1f s for the case's %d configurations\n", (eng_now_ms() - t0) * 1e-3, nconfigs);
  fflush(stdout);
  if (st.code != TBE_OK)
    fprintf(stderr, "%s: %s\n", canon, st.message);
  tbe_batch_free(&b);
  case_free(c);
  return st.code == TBE_OK ? 0 : 3;
}

/* gpu_run_forward refuses configurations its kernels do not have (bags 8 with groups of four
 * lanes would read another group's bag ends), naming the field. Returns the failures. */
static int check_preconditions(void)
{
  static const struct {
    gpu_fwd_config cfg;
    const char *field;
  } bad[] = {
    {{8, 4, 0, GPU_SMALL_OFF, GPU_GATHER_AUTO}, "fwd.bags"},
    {{3, 0, 0, GPU_SMALL_OFF, GPU_GATHER_AUTO}, "fwd.bags"},
    {{0, 16, 0, GPU_SMALL_OFF, GPU_GATHER_AUTO}, "fwd.width"},
    {{0, 2, 0, GPU_SMALL_OFF, GPU_GATHER_AUTO}, "fwd.width"},
    {{0, 0, 0, (gpu_small_mode)7, GPU_GATHER_AUTO}, "fwd.small"},
    {{0, 0, 0, GPU_SMALL_OFF, (gpu_gather_mode)5}, "fwd.gather"},
  };
  tbe_case *c;
  tbe_batch b;
  tbe_layout l;
  if (case_parse("B=8 L=3", &c).code != TBE_OK || case_generate(c, &b).code != TBE_OK ||
      tbe_layout_init(&l, &b).code != TBE_OK) {
    fprintf(stderr, "cannot build the preconditions' batch\n");
    return 1;
  }
  int fails = 0;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpu_fwd_result g;
    tbe_status st = gpu_run_forward(&b, &l, TBE_BOUNDS_WARNING, &bad[i].cfg, &g);
    if (st.code != TBE_EINVAL || strcmp(st.field, bad[i].field) != 0) {
      printf("FAIL precondition %s: bags=%d width=%d small=%d gave '%s' (%s)\n", bad[i].field,
             bad[i].cfg.bags, bad[i].cfg.width, (int)bad[i].cfg.small, tbe_code_name(st.code),
             st.message);
      fails++;
    }
    gpu_fwd_result_free(&g);
  }
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  case_free(c);
  return fails;
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
  long only = 0; /* --case K: the K-th case alone (1-based, over the files in order) */
  for (; first < argc && argv[first][0] == '-'; first++) {
    char *end = NULL;
    if (strcmp(argv[first], "--default-config") == 0)
      nconfigs = 1;
    else if (strcmp(argv[first], "--case") == 0 && first + 1 < argc &&
             (only = strtol(argv[first + 1], &end, 10)) > 0 && !*end)
      first++;
    else
      break;
  }
  if (first >= argc || argv[first][0] == '-') {
    fputs("usage: gpu_forward_test [--default-config] [--case K] CASEFILE...\n", stderr);
    return 2;
  }
  eng_options o = {.engines = (1u << ENG_REF) | (1u << ENG_GPU), .max_violations = 1};
  eng_ctx *x;
  if ((st = eng_open(&o, &x)).code != TBE_OK || eng_unavailable(x, ENG_GPU)) {
    fprintf(stderr, "cannot open the engines: %s\n",
            st.code != TBE_OK ? st.message : eng_unavailable(x, ENG_GPU));
    eng_close(x);
    return 3;
  }
  int failures = check_preconditions(), cases = 0, seen = 0, rc = 0;
  for (int a = first; a < argc && !rc; a++) {
    case_list cl;
    st = case_file_read(argv[a], &cl);
    if (st.code != TBE_OK) {
      fprintf(stderr, "%s\n", st.message);
      rc = 2;
      break;
    }
    for (int i = 0; i < cl.count && !rc; i++, seen++)
      if (!only || seen + 1 == only) {
        rc = run_case(x, cl.lines[i].text, nconfigs, &failures);
        cases++;
      }
    case_list_free(&cl);
  }
  eng_close(x);
  if (rc)
    return rc;
  if (only && !cases) {
    fprintf(stderr, "--case %ld: the files hold %d cases\n", only, seen);
    return 2;
  }
  printf("gpu forward vs reference: %d cases x %d configurations, %d failures (%s)\n", cases,
         nconfigs, failures, desc);
  printf("small-table path: %lld elements, %lld (%.2f%%) equal to the tensor-core model bit for "
         "bit (each one short of 100%% is a failure), worst error/bound %.3g\n",
         (long long)model_elements, (long long)model_equal,
         model_elements ? 100.0 * (double)model_equal / (double)model_elements : 0.0,
         worst_small_ratio);
  return failures ? 1 : 0;
}
