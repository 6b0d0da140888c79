/* engine_test.c: the engines' checks catch an injected one-ulp fault at the right coordinates
 * (pooled, VBE, pooling NONE, indices, offsets, offender), an unavailable engine is a skip with
 * its reason and never a pass, and a FATAL case is compared by its offender; the backward's
 * outputs (weights, momentum, psw_grad) are checked likewise, against the exact twin in atomic
 * mode. Through a CPU stand-in for the GPU forward (the reference's bounds check and forward,
 * the tensor-core model on the features it chooses): the output is compared per feature, the
 * GPU's choice of small-table features is read, not recomputed, a dropped lookup on the small
 * path is caught at L = 20,000, and a rerun that differs fails. Not the metrics' own tests
 * (compare_test.c).
 */
#include <stdlib.h>
#include <string.h>

#include "backward_small.h"
#include "bounds.h"
#include "engine.h"
#include "forward.h"
#include "forward_small.h"
#include "test_util.h"

/* Runs one case text through the engines of opt into *r; returns 0 on success. */
static int run_text(const eng_options *opt, const char *text, eng_case_result *r)
{
  tbe_case *c;
  tbe_status s = case_parse(text, &c);
  CHECK(s.code == TBE_OK, "'%s': %s", text, s.message);
  if (s.code != TBE_OK)
    return -1;
  char canon[1024];
  case_format(c, canon, sizeof canon);
  eng_ctx *x;
  s = eng_open(opt, &x);
  if (s.code == TBE_OK)
    s = eng_run_case(x, c, canon, r);
  CHECK(s.code == TBE_OK, "'%s': %s", text, s.message);
  eng_close(x);
  case_free(c);
  return s.code == TBE_OK ? 0 : -1;
}

static const eng_check *find(const eng_case_result *r, eng_id e, const char *output)
{
  for (int i = 0; i < r->n_checks; i++)
    if (r->checks[i].engine == e && !strcmp(r->checks[i].output, output))
      return &r->checks[i];
  return NULL;
}

static eng_options options(unsigned engines, const char *fault)
{
  eng_options o = {.engines = engines, .max_violations = 4};
  if (fault) {
    tbe_status s = eng_parse_fault(fault, &o);
    CHECK(s.code == TBE_OK, "fault '%s': %s", fault, s.message);
  }
  return o;
}

static void test_lists(void)
{
  unsigned m = 0;
  CHECK(eng_parse_list("gpu", &m).code == TBE_OK && m == ((1u << ENG_REF) | (1u << ENG_GPU)),
        "gpu alone must bring the reference: mask %u", m);
  CHECK(eng_parse_list("ref,bogus", &m).code == TBE_EINVAL, "an unknown engine was accepted");
  CHECK(eng_parse_list("ref,,gpu", &m).code == TBE_EINVAL, "an empty name was accepted");
  char buf[64];
  eng_format_list((1u << ENG_ORACLE) | (1u << ENG_REF), buf, sizeof buf);
  CHECK(!strcmp(buf, "ref,oracle"), "format: %s", buf);
  eng_options o;
  CHECK(eng_parse_fault("gpu:output@17", &o).code == TBE_OK && o.fault_engine == ENG_GPU &&
            !strcmp(o.fault_output, "output") && o.fault_index == 17,
        "gpu:output@17");
  static const char *const bad[] = {"gpu", "gpu:", "x:output", "gpu:output@", "gpu:output@-1",
                                    "gpu:output@3x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK(eng_parse_fault(bad[i], &o).code == TBE_EINVAL, "fault '%s' accepted", bad[i]);
}

/* The reference alone: a pass against the exact forward, timed, and the same bits twice. */
static void test_reference(void)
{
  eng_options o = options(1u << ENG_REF, NULL);
  eng_case_result a, b;
  if (run_text(&o, "T=2 B=16 E=50,60 D=8,24 L=1..9 weighted=1", &a))
    return;
  const eng_check *c = find(&a, ENG_REF, "output");
  CHECK(a.n_checks == 1 && c && c->status == ENG_PASS && c->metric == CMP_BOUND &&
            !strcmp(c->baseline, "exact") && c->cmp.elements == 16 * 32,
        "reference vs exact: %d checks", a.n_checks);
  CHECK(a.ref_ms >= 0 && a.gpu_ms < 0 && a.n_perf == 1 && a.perf[0].bytes > 0,
        "timings: ref %g gpu %g perf %d", a.ref_ms, a.gpu_ms, a.n_perf);
  if (!run_text(&o, "T=2 B=16 E=50,60 D=8,24 L=1..9 weighted=1", &b)) {
    CHECK(b.checks[0].digest == c->digest, "the reference is not deterministic");
    eng_case_result_free(&b);
  }
  eng_case_result_free(&a);
}

/* A one-ulp fault at element i of the reference's output must fail against the exact forward
 * (L=1: the exact value is the row itself, bound half an ulp) and be located at `where`. */
static void expect_ref_fault(const char *text, int64_t i, const char *where)
{
  char fault[64];
  snprintf(fault, sizeof fault, "ref:output@%lld", (long long)i);
  eng_options o = options(1u << ENG_REF, fault);
  eng_case_result r;
  if (run_text(&o, text, &r))
    return;
  const eng_check *c = find(&r, ENG_REF, "output");
  CHECK(c && c->status == ENG_FAIL && c->cmp.violations == 1 && c->n_violations == 1 &&
            c->violations[0].v.index == i && !strcmp(c->violations[0].coordinates, where),
        "'%s' fault at %lld: status %d, at '%s', wanted '%s'", text, (long long)i,
        c ? (int)c->status : -1, c && c->n_violations ? c->violations[0].coordinates : "",
        where);
  CHECK(c && strstr(c->reason, where), "the reason does not name the coordinates: %s",
        c ? c->reason : "");
  eng_case_result_free(&r);
}

static void test_coordinates(void)
{
  /* [B, total_D] with D = 4, 8: element 3*12 + 4 + 5 is sample 3 of feature 1, d 5 */
  expect_ref_fault("T=2 B=5 E=10,10 D=4,8 L=1", 3 * 12 + 4 + 5, "t=1 b=3 d=5");
  /* TBE_SEMANTICS.md's VBE example: blocks (r0,f0) at 0, (r0,f1) at 4, (r1,f0) at 28,
   * (r1,f1) at 36 */
  expect_ref_fault("T=2 vbe=1 R=2 B=1/2,3/1 E=10 D=4,8 L=1", 30,
                   "t=0 b=1 d=2 (rank 1, sample 0)");
  expect_ref_fault("T=2 vbe=1 R=2 B=1/2,3/1 E=10 D=4,8 L=1", 20,
                   "t=1 b=2 d=0 (rank 0, sample 2)");
  expect_ref_fault("T=2 B=3 E=10 D=4 L=1 pool=none", 4 * 4 + 2, "p=4 d=2");
}

/* Without NumPy (or without Python) the oracle is a skip with the reason, never a pass. */
static void test_unavailable_oracle(void)
{
  setenv("TBECHECK_PYTHON", "/nonexistent/python3", 1);
  eng_options o = options((1u << ENG_REF) | (1u << ENG_ORACLE), NULL);
  eng_case_result r;
  int rc = run_text(&o, "B=8 L=3", &r);
  unsetenv("TBECHECK_PYTHON");
  if (rc)
    return;
  int skips = 0;
  for (int i = 0; i < r.n_checks; i++) {
    const eng_check *c = &r.checks[i];
    if (c->engine != ENG_ORACLE)
      continue;
    skips++;
    CHECK(c->status == ENG_SKIP && strstr(c->reason, "cannot start"),
          "oracle %s: status %d reason '%s'", c->output, c->status, c->reason);
  }
  CHECK(skips == 4, "expected skips for output, indices, offsets, warnings; got %d", skips);
  CHECK(!eng_case_failed(&r), "a skip counted as a failure");
  eng_case_result_free(&r);
}

/* With the oracle (skipped, and said so, where NumPy is missing): bit-exact agreement, the
 * FATAL offender, and faults in integer outputs located by position and bag. */
static void test_oracle(void)
{
  eng_options probe = options((1u << ENG_REF) | (1u << ENG_ORACLE), NULL);
  eng_ctx *x;
  if (eng_open(&probe, &x).code != TBE_OK)
    return;
  const char *why = eng_unavailable(x, ENG_ORACLE); /* x's text: print it before eng_close */
  if (why)
    printf("oracle not available here (%s): its checks are skips, verified above\n", why);
  eng_close(x);
  if (why)
    return;
  eng_case_result r;
  if (!run_text(&probe, "T=3 vbe=1 R=2 B=0..5 E=40,5,7 D=4,8,2 L=0..6 weighted=1 "
                        "invalid=0.2 invalid_kind=mix corrupt=decreasing:2 wdtype=bf16", &r)) {
    for (int i = 0; i < r.n_checks; i++)
      CHECK(r.checks[i].status == ENG_PASS, "%s %s: %s", eng_name(r.checks[i].engine),
            r.checks[i].output, r.checks[i].reason);
    CHECK(r.n_checks == 5, "ref:exact + 4 oracle checks, got %d", r.n_checks);
    eng_case_result_free(&r);
  }
  if (!run_text(&probe, "B=8 E=10 L=3 invalid=0.3 bounds=fatal", &r)) {
    const eng_check *c = find(&r, ENG_ORACLE, "offender");
    CHECK(c && c->status == ENG_PASS && c->cmp.elements == 4,
          "index offender compared on all four fields: %s", c ? c->reason : "missing");
    CHECK(!find(&r, ENG_REF, "output") && !find(&r, ENG_ORACLE, "output"),
          "a FATAL case has no output to compare");
    eng_case_result_free(&r);
  }
  if (!run_text(&probe, "B=8 E=10 L=3 corrupt=negative bounds=fatal", &r)) {
    const eng_check *c = find(&r, ENG_ORACLE, "offender");
    CHECK(c && c->status == ENG_PASS && c->cmp.elements == 2,
          "offset offender compared on feature and bag: %s", c ? c->reason : "missing");
    eng_case_result_free(&r);
  }
  static const struct {
    const char *fault, *output, *where;
  } faults[] = {
    {"oracle:indices@7", "indices", "p=7"},
    {"oracle:offsets@3", "offsets", "bag=3"},
    {"oracle:warnings", "warnings", "i=0"},
    {"oracle:output@9", "output", "t=0 b=2 d=1"},
  };
  for (size_t k = 0; k < sizeof faults / sizeof faults[0]; k++) {
    eng_options o = options((1u << ENG_REF) | (1u << ENG_ORACLE), faults[k].fault);
    if (run_text(&o, "B=8 E=10 D=4 L=3 invalid=0.1", &r))
      continue;
    const eng_check *c = find(&r, ENG_ORACLE, faults[k].output);
    CHECK(c && c->status == ENG_FAIL && c->n_violations == 1 &&
              !strcmp(c->violations[0].coordinates, faults[k].where),
          "%s: status %d at '%s'", faults[k].fault, c ? (int)c->status : -1,
          c && c->n_violations ? c->violations[0].coordinates : "");
    CHECK(eng_case_failed(&r), "%s: the case did not fail", faults[k].fault);
    eng_case_result_free(&r);
  }
}

/* The backward's outputs: the reference's atomic-mode weights and momentum pass against the
 * exact twin, and a one-ulp fault on a row whose runs have one chunk (bound 0) fails there; with
 * the oracle, each output is compared bit for bit and a fault is found at its coordinates. */
static void test_backward(void)
{
  const char *atomic = "B=80 D=32 L=8 hot=0:17:600 opt=rowwise_adagrad wd=l2 lambda=0.3 "
                       "bwd.combine=atomic seed=1";
  eng_options o = options(1u << ENG_REF, NULL);
  eng_case_result r;
  if (!run_text(&o, atomic, &r)) {
    for (int i = 0; i < r.n_checks; i++)
      CHECK(r.checks[i].status == ENG_PASS && !strcmp(r.checks[i].baseline, "exact"),
            "%s: %s", r.checks[i].output, r.checks[i].reason);
    const eng_check *w = find(&r, ENG_REF, "weights"), *m = find(&r, ENG_REF, "momentum");
    CHECK(w && m && !strcmp(w->path, "backward.atomic") && w->cmp.worst_bound_ratio > 0,
          "atomic weights and momentum held to their bounds");
    eng_case_result_free(&r);
  }
  o = options(1u << ENG_REF, "ref:weights@3");
  if (!run_text(&o, atomic, &r)) {
    const eng_check *c = find(&r, ENG_REF, "weights");
    CHECK(c && c->status == ENG_FAIL && c->n_violations == 1 &&
              !strcmp(c->violations[0].coordinates, "table=0 row=0 d=3"),
          "ref:weights@3: status %d at '%s'", c ? (int)c->status : -1,
          c && c->n_violations ? c->violations[0].coordinates : "");
    eng_case_result_free(&r);
  }
  eng_ctx *x;
  o = options((1u << ENG_REF) | (1u << ENG_ORACLE), NULL);
  if (eng_open(&o, &x).code != TBE_OK)
    return;
  int have_oracle = !eng_unavailable(x, ENG_ORACLE);
  eng_close(x);
  static const struct {
    const char *fault, *output, *where;
  } faults[] = {
    {NULL, NULL, NULL},
    {"oracle:weights@29", "weights", "table=0 row=1 d=5"},
    {"oracle:momentum@33", "momentum", "table=1 row=3"},
    {"oracle:psw_grad@1", "psw_grad", "p=1"},
  };
  for (size_t k = 0; have_oracle && k < sizeof faults / sizeof faults[0]; k++) {
    o = options((1u << ENG_REF) | (1u << ENG_ORACLE), faults[k].fault);
    if (run_text(&o, "T=2 B=8 E=30 D=24 L=3 weighted=1 opt=rowwise_adagrad seed=2", &r))
      continue;
    if (!faults[k].fault) {
      static const char *const outs[] = {"weights", "momentum", "psw_grad"};
      for (int i = 0; i < 3; i++) {
        const eng_check *c = find(&r, ENG_ORACLE, outs[i]);
        CHECK(c && c->status == ENG_PASS && c->metric == CMP_BITWISE, "oracle %s: %s", outs[i],
              c ? c->reason : "missing");
      }
    } else {
      const eng_check *c = find(&r, ENG_ORACLE, faults[k].output);
      CHECK(c && c->status == ENG_FAIL && c->n_violations == 1 &&
                !strcmp(c->violations[0].coordinates, faults[k].where),
            "%s: status %d at '%s'", faults[k].fault, c ? (int)c->status : -1,
            c && c->n_violations ? c->violations[0].coordinates : "");
    }
    eng_case_result_free(&r);
  }
}

/* ---- a CPU stand-in for the GPU forward ---- */

static struct {
  int all_small;     /* 1: every eligible feature takes the small path, whatever cfg says */
  int64_t drop;      /* >= 0: the small path skips the lookup at this position (a planted bug) */
  int64_t rerun;     /* reported as rerun_diffs */
} stand_in = {0, -1, 0};

static void *copy_of(const void *p, size_t n)
{
  void *q = malloc(n + 1);
  if (q && n)
    memcpy(q, p, n);
  return q;
}

/* The stand-in's backward, bwd.small_tc=on only: ref_backward_small_call on w (the repaired
 * batch) for the tables of the features on the small forward path (small), into br. */
static tbe_status stand_in_small_tc(tbe_batch *w, const tbe_layout *l, const ref_bwd_config *bcfg,
                                    const void *grad_output, const float *momentum,
                                    const unsigned char *small, gpu_bwd_result *br)
{
  const size_t wb = tbe_dtype_size(w->wdtype) * (size_t)w->table_offset[w->num_tables];
  unsigned char *tables = calloc((size_t)w->num_tables * 2 + 1, 1);
  br->weights = copy_of(w->weights, wb);
  br->momentum = copy_of(momentum, sizeof(float) * (size_t)ref_bwd_rows(w));
  br->small_tc_mask = calloc((size_t)w->T + 1, 1);
  ref_small_tc_tables(w, bcfg, small, tables);
  w->weights = br->weights;
  tbe_status s = ref_backward_small_call(w, l, bcfg, grad_output, tables, br->momentum, NULL,
                                         tables + w->num_tables);
  for (int32_t t = 0; t < w->T; t++)
    br->small_tc_mask[t] = tables[w->num_tables + w->feature_table_map[t]];
  free(tables);
  return s;
}

/* gpu_run's contract on the CPU (the backward only with bwd.small_tc=on): bounds check and
 * forward of the reference on copies of the indices and offsets; features on the small path
 * (fwd.small=on, or stand_in.all_small) get the tensor-core model's bits, with stand_in.drop's
 * lookup left out of it; the backward stand_in_small_tc's. */
static tbe_status stand_in_run(const tbe_batch *b, const tbe_layout *l, tbe_bounds_mode mode,
                               const gpu_fwd_config *cfg, const ref_bwd_config *bcfg,
                               const gpu_bwd_config *gcfg, const void *grad_output,
                               const float *momentum, gpu_fwd_result *r, gpu_bwd_result *br)
{
  memset(r, 0, sizeof *r);
  if (br)
    memset(br, 0, sizeof *br);
  if (bcfg && !gcfg->small_tc)
    return tbe_error(TBE_EINVAL, "gpu", -1, "the stand-in runs no backward but bwd.small_tc's");
  size_t isz = tbe_itype_size(b->itype);
  tbe_batch w = *b;
  w.indices = r->indices = copy_of(b->indices, isz * (size_t)b->N);
  w.offsets = r->offsets = copy_of(b->offsets, isz * (size_t)(l->total_B + 1));
  r->small_mask = calloc((size_t)b->T + 1, 1);
  r->out = calloc((size_t)l->out_elems + 1, tbe_dtype_size(b->out_dtype));
  r->bounds = ref_bounds_check(&w, l, mode, &r->warnings);
  r->rerun_diffs = stand_in.rerun;
  if (r->bounds.code != TBE_OK)
    return tbe_ok();
  tbe_status s = ref_forward(&w, l, r->out);
  for (int32_t t = 0; t < b->T; t++) {
    r->small_mask[t] = (cfg->small == GPU_SMALL_ON || stand_in.all_small) &&
                       ref_small_eligible(b, t);
    r->small_features += r->small_mask[t];
  }
  void *model_idx = copy_of(w.indices, isz * (size_t)b->N);
  w.indices = model_idx;
  if (stand_in.drop >= 0)
    tbe_iset(model_idx, b->itype, stand_in.drop, -1);
  if (s.code == TBE_OK && r->small_features)
    s = ref_forward_small_model(&w, l, r->small_mask, r->out);
  w.indices = r->indices;
  if (s.code == TBE_OK && bcfg)
    s = stand_in_small_tc(&w, l, bcfg, grad_output, momentum, r->small_mask, br);
  free(model_idx);
  return s;
}

static void stand_in_bwd_free(gpu_bwd_result *r)
{
  free(r->weights);
  free(r->momentum);
  free(r->small_tc_mask);
  memset(r, 0, sizeof *r);
}

static void stand_in_free(gpu_fwd_result *r)
{
  free(r->out);
  free(r->indices);
  free(r->offsets);
  free(r->small_mask);
  memset(r, 0, sizeof *r);
}

static const eng_check *find_on(const eng_case_result *r, eng_id e, const char *baseline,
                                const char *path, const char *output)
{
  for (int i = 0; i < r->n_checks; i++) {
    const eng_check *c = &r->checks[i];
    if (c->engine == e && !strcmp(c->baseline, baseline) && !strcmp(c->path, path) &&
        !strcmp(c->output, output))
      return c;
  }
  return NULL;
}

static eng_options stand_in_options(const char *fault)
{
  eng_options o = options((1u << ENG_REF) | (1u << ENG_GPU), fault);
  o.gpu.run = stand_in_run;
  o.gpu.fwd_free = stand_in_free;
  o.gpu.bwd_free = stand_in_bwd_free;
  return o;
}

/* Feature 0 (E = 16, D = 64) takes the small path, feature 1 (E = 100) cannot: feature 1's
 * columns are held to the reference bit for bit, feature 0's to the model bit for bit and to the
 * bound. A one-ulp fault in a generic column fails on path "forward" (it passed when one small
 * feature sent the whole output to the bound), one in a small column fails the model check. */
static void test_per_feature(void)
{
  const char *text = "T=2 B=4 E=16,100 D=64,64 L=20 wdtype=fp16 fwd.small=on seed=3";
  static const struct {
    const char *fault, *baseline, *path;
    int64_t elements;
  } runs[] = {
    {NULL, NULL, NULL, 0},
    {"gpu:output@64", "ref", "forward", 4 * 64},        /* bag 0 of feature 1, d = 0 */
    {"gpu:output@130", "model", "forward.small", 4 * 64}, /* bag 1 of feature 0, d = 2 */
  };
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    eng_options o = stand_in_options(runs[k].fault);
    eng_case_result r;
    if (run_text(&o, text, &r))
      continue;
    const eng_check *gen = find_on(&r, ENG_GPU, "ref", "forward", "output");
    const eng_check *mod = find_on(&r, ENG_GPU, "model", "forward.small", "output");
    const eng_check *bnd = find_on(&r, ENG_GPU, "exact", "forward.small", "output");
    CHECK(gen && mod && bnd && gen->cmp.elements == 4 * 64 && mod->cmp.elements == 4 * 64 &&
              bnd->cmp.elements == 4 * 64 && gen->metric == CMP_BITWISE &&
              mod->metric == CMP_BITWISE && bnd->metric == CMP_BOUND,
          "%s: the output is not split into its generic and small-table features",
          runs[k].fault ? runs[k].fault : "no fault");
    if (!runs[k].fault) {
      CHECK(!eng_case_failed(&r), "the stand-in's model output failed");
    } else {
      const eng_check *c = find_on(&r, ENG_GPU, runs[k].baseline, runs[k].path, "output");
      CHECK(c && c->status == ENG_FAIL && c->cmp.violations == 1,
            "%s: not caught on %s against %s", runs[k].fault, runs[k].path, runs[k].baseline);
      CHECK(bnd && bnd->status == ENG_PASS, "%s: one ulp outside the small path's bound?",
            runs[k].fault);
    }
    eng_case_result_free(&r);
  }
}

/* fwd.small=auto with bags far shorter than any auto threshold: the stand-in still takes the
 * small path for the eligible feature, and the harness follows its mask (recomputing the GPU's
 * policy held the model's bits to the reference's and failed them). */
static void test_reads_the_mask(void)
{
  stand_in.all_small = 1;
  eng_options o = stand_in_options(NULL);
  eng_case_result r;
  if (!run_text(&o, "T=2 B=4 E=16,100 D=64,64 L=3 wdtype=fp16 seed=4", &r)) {
    const eng_check *mod = find_on(&r, ENG_GPU, "model", "forward.small", "output");
    CHECK(mod && mod->status == ENG_PASS && !eng_case_failed(&r),
          "the GPU's small-table choice was not followed: %s", mod ? mod->reason : "no check");
    eng_case_result_free(&r);
  }
  stand_in.all_small = 0;
}

/* A kernel that skips one lookup of a bag of 20,000 (in the first 256, or past them): the
 * bound (about 47 rows wide there) cannot see it, the model's bits must. */
static void test_dropped_lookup(void)
{
  const char *text = "B=2 E=16 D=64 L=20000 wdtype=fp16 fwd.small=on seed=5";
  static const int64_t drop[] = {100, 12345, 20000 + 19000};
  for (size_t k = 0; k < sizeof drop / sizeof drop[0]; k++) {
    stand_in.drop = drop[k];
    eng_options o = stand_in_options(NULL);
    eng_case_result r;
    if (!run_text(&o, text, &r)) {
      const eng_check *mod = find_on(&r, ENG_GPU, "model", "forward.small", "output");
      CHECK(mod && mod->status == ENG_FAIL && mod->cmp.violations > 0 && eng_case_failed(&r),
            "the lookup dropped at position %lld was not caught: %s", (long long)drop[k],
            mod ? mod->reason : "no check");
      const eng_check *bnd = find_on(&r, ENG_GPU, "exact", "forward.small", "output");
      if (bnd)
        printf("dropped lookup at %lld: model check %s, bound check %s (worst ratio %.3g)\n",
               (long long)drop[k], eng_status_name(mod ? mod->status : ENG_ERROR),
               eng_status_name(bnd->status), bnd->cmp.worst_bound_ratio);
      eng_case_result_free(&r);
    }
  }
  stand_in.drop = -1;
}

/* bwd.small_tc=on: table 0 (E = 16, on the small forward path) on path backward.small, held to
 * the model bit for bit and within the bound, table 1 (E = 100) on backward, bit for bit to the
 * reference; a one-ulp fault in table 0's weights fails the model check alone, one in table 1's
 * the reference's. */
static void test_small_tc(void)
{
  const char *text = "T=2 B=40 E=16,100 D=64,64 L=20 wdtype=fp16 fwd.small=on "
                     "opt=rowwise_adagrad bwd.small_tc=on seed=3";
  static const struct {
    const char *fault, *baseline, *path;
  } runs[] = {
      {NULL, NULL, NULL},
      {"gpu:weights@70", "model", "backward.small"}, /* table 0, row 1 */
      {"gpu:weights@2000", "ref", "backward"},       /* table 1, row 15 */
  };
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    eng_options o = stand_in_options(runs[k].fault);
    eng_case_result r;
    if (run_text(&o, text, &r))
      continue;
    const eng_check *gen = find_on(&r, ENG_GPU, "ref", "backward", "weights");
    const eng_check *mod = find_on(&r, ENG_GPU, "model", "backward.small", "weights");
    const eng_check *bnd = find_on(&r, ENG_GPU, "exact", "backward.small", "weights");
    const eng_check *mom = find_on(&r, ENG_GPU, "model", "backward.small", "momentum");
    CHECK(gen && mod && bnd && mom && gen->cmp.elements == 100 * 64 &&
              mod->cmp.elements == 16 * 64 && bnd->cmp.elements == 16 * 64 &&
              mom->cmp.elements == 16 && bnd->metric == CMP_BOUND,
          "%s: the weights are not split into the generic and the small_tc tables",
          runs[k].fault ? runs[k].fault : "no fault");
    if (!runs[k].fault) {
      CHECK(!eng_case_failed(&r), "bwd.small_tc's model failed: %s",
            mod && mod->status != ENG_PASS ? mod->reason : bnd ? bnd->reason : "");
      if (bnd)
        printf("bwd.small_tc: weights within %.3g of their bound\n", bnd->cmp.worst_bound_ratio);
    } else {
      const eng_check *c = find_on(&r, ENG_GPU, runs[k].baseline, runs[k].path, "weights");
      CHECK(c && c->status == ENG_FAIL && c->cmp.violations == 1,
            "%s: not caught on %s against %s", runs[k].fault, runs[k].path, runs[k].baseline);
    }
    eng_case_result_free(&r);
  }
}

/* A GPU whose second run over another poison differs (an unwritten element, or a racy one)
 * fails its output even where every element matches. */
static void test_rerun(void)
{
  stand_in.rerun = 3;
  eng_options o = stand_in_options(NULL);
  eng_case_result r;
  if (!run_text(&o, "B=4 E=10 D=8 L=3", &r)) {
    const eng_check *c = find_on(&r, ENG_GPU, "ref", "forward", "output");
    CHECK(c && c->status == ENG_FAIL && strstr(c->reason, "second run"), "rerun: %s",
          c ? c->reason : "no check");
    eng_case_result_free(&r);
  }
  stand_in.rerun = 0;
}

int main(void)
{
  test_per_feature();
  test_reads_the_mask();
  test_dropped_lookup();
  test_rerun();
  test_small_tc();
  test_lists();
  test_reference();
  test_coordinates();
  test_unavailable_oracle();
  test_oracle();
  test_backward();
  return TEST_MAIN_RESULT();
}
