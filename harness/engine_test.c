/* engine_test.c: the engines' checks catch an injected one-ulp fault at the right coordinates
 * (pooled, VBE, pooling NONE, indices, offsets, offender), an unavailable engine is a skip with
 * its reason and never a pass, and a FATAL case is compared by its offender; the backward's
 * outputs (weights, momentum, psw_grad) are checked likewise, against the exact twin in atomic
 * mode. Not the metrics' own tests (compare_test.c).
 */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
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

int main(void)
{
  test_lists();
  test_reference();
  test_coordinates();
  test_unavailable_oracle();
  test_oracle();
  test_backward();
  return TEST_MAIN_RESULT();
}
