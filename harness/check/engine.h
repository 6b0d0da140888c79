/* engine.h: the engines (ref, gpu, oracle) that run one batch, and the checks that compare each
 * engine's named outputs with its baseline. Not the comparison metrics (compare.h) nor storage.
 *
 * An engine turns a pristine batch into a list of named outputs ("output", "indices", "offsets",
 * "warnings", "offender"; with a backward "weights", "momentum", "psw_grad"), each on the path
 * that computed it; the GPU's forward output also names the features it put on the small-table
 * path, whose elements are on path "forward.small", and its weights and momentum the features
 * whose tables bwd.small_tc updated, whose elements are on path "backward.small". One table in
 * engine.c (eng_metrics)
 * declares how each (path, output) is held: to the reference's bits (metric bitwise, baseline
 * "ref"), to the bits of the path's model (bitwise, "model"), or to its exact twin within the
 * derived bound (bound_ratio, "exact"); a path may have several (forward.small: model, then
 * bound), and the reference's own outputs on order-free paths are held to the exact twins.
 * Every comparison, skip or error becomes one eng_check: (engine, baseline, path, output,
 * status, metrics, first violations at their coordinates), which db.h stores as one results
 * row. An engine that is not available is a `skip` with the reason, never a pass.
 *
 * Invariant: after eng_run_batch the batch holds its pristine indices and offsets again; each
 * engine saw them pristine.
 */
#ifndef HARNESS_ENGINE_H
#define HARNESS_ENGINE_H

#include <stdint.h>

#include "case.h"
#include "compare.h"
#include "gen.h"
#include "tbe.h"
#include "tbe_gpu.h"

/* The engines: three of tbecheck's own, and up to ENG_EXT_MAX external ones ("ext.NAME",
 * engine_ext.h), each given the next id from ENG_EXT on when its name is first parsed. */
#define ENG_EXT_MAX 4
typedef enum { ENG_REF = 0, ENG_GPU, ENG_ORACLE, ENG_EXT, ENG_COUNT = ENG_EXT + ENG_EXT_MAX } eng_id;

typedef enum {
  ENG_PASS = 0,
  ENG_FAIL,
  ENG_ERROR,       /* the engine failed on this case (its message is the reason) */
  ENG_SKIP,        /* the engine is not available here (no GPU, no NumPy) */
  ENG_UNSUPPORTED  /* the engine runs, but not this case or not this output */
} eng_status;

/* Names as stored in the database: "ref", "gpu", "oracle", "ext.NAME"; "pass", "fail", ... */
const char *eng_name(eng_id e);
const char *eng_status_name(eng_status s);

/* Parses a comma-separated list of engine names into a bit mask (1u << eng_id). The reference
 * is always added: it is every other engine's baseline. TBE_EINVAL names an unknown engine, a
 * malformed external name (ext.NAME, NAME of 1 to 24 of [a-z0-9_]) or one too many. */
tbe_status eng_parse_list(const char *list, unsigned *mask);

/* The engines a command runs when not told (run, replay, import, fuzz). */
#define ENG_DEFAULT_LIST "ref,gpu,oracle"

/* Formats a mask as "ref,gpu,oracle" (in eng_id order) into buf. */
void eng_format_list(unsigned mask, char *buf, size_t n);

/* The Python interpreter of the worker engines and the HTML report: $TBECHECK_PYTHON, or else
 * the one CMake found when it configured the build. */
const char *eng_python(void);

/* The GPU calls the gpu engine makes (gpu_run's contract). */
typedef struct {
  tbe_status (*run)(const tbe_batch *b, const tbe_layout *l, tbe_bounds_mode mode,
                    const gpu_fwd_config *fcfg, const ref_bwd_config *bcfg,
                    const gpu_bwd_config *gcfg, const void *grad_output, const float *momentum,
                    gpu_fwd_result *fr, gpu_bwd_result *br);
  void (*fwd_free)(gpu_fwd_result *r);
  void (*bwd_free)(gpu_bwd_result *r);
} eng_gpu_calls;

typedef struct {
  unsigned engines;       /* mask of engines to run (eng_parse_list) */
  eng_gpu_calls gpu;      /* zeros: gpu_run, gpu_fwd_result_free, gpu_bwd_result_free; a
                           * test's CPU stand-in otherwise (the GPU is then not probed) */
  int max_violations;     /* violations recorded per check, with coordinates */
  int worker_timeout_s;   /* a worker engine's longest wait for one line (its greeting, a
                           * case's reply): after it the worker is killed, the case is an
                           * error for that engine and a new worker takes the next (0: none) */
  eng_id fault_engine;    /* test the tester: after this engine ran, ... */
  char fault_output[32];  /* ... its output of this name ("": no fault) ... */
  int64_t fault_index;    /* ... moves at this element by one unit in the last place (integers:
                           * by one) */
} eng_options;

/* Parses "ENGINE:OUTPUT[@INDEX]" (e.g. "gpu:output@17"; INDEX defaults to 0) into o's fault
 * fields. TBE_EINVAL if it is malformed, names an unknown engine, or an output that engine never
 * computes. Whether the fault lands (the engine runs here, the output is that long) only the
 * run can tell: eng_case_result.fault_elements. */
tbe_status eng_parse_fault(const char *spec, eng_options *o);

typedef struct eng_ctx eng_ctx;

/* Prepares the engines in opt->engines: probes the GPU and starts the oracle's worker process.
 * An engine that cannot run is not an error: eng_unavailable() says why and its checks are
 * skips. Returns TBE_ENOMEM or TBE_EIO only if tbecheck itself cannot go on. */
tbe_status eng_open(const eng_options *opt, eng_ctx **out);
void eng_close(eng_ctx *x);

/* NULL if engine e was asked for and can run, else why not ("not asked for" if it was not). */
const char *eng_unavailable(const eng_ctx *x, eng_id e);

/* gpu_probe's description of the GPU ("" without one). */
const char *eng_gpu_description(const eng_ctx *x);

/* What each external engine that runs here said it is, into buf: "ext.fbgemm: order
 * fbgemm_cpu, fbgemm_gpu 1.8.0, torch 2.13.0; ..." ("" when none runs). */
void eng_describe_external(const eng_ctx *x, char *buf, size_t n);

/* One violation of a check, at its coordinates. */
typedef struct {
  cmp_violation v;
  char coordinates[64]; /* 't=1 b=3 d=17' (pooled), 'p=42 d=3' (pooling NONE), 'p=42'
                         * (indices), 'bag=7' (offsets), 'i=2' (small integer vectors) */
} eng_violation;

/* One engine output held to its baseline, or the reason it was not. */
typedef struct {
  eng_id engine;
  const char *baseline;     /* "ref" or "exact" */
  const char *path;         /* "forward", "forward.small", "bounds", ... */
  const char *output;       /* "output", "indices", ... */
  cmp_metric metric;
  eng_status status;
  char reason[400];         /* why it is not a pass ("" for a pass) */
  int compared;             /* 1: the metrics below hold a comparison */
  cmp_result cmp;           /* cmp.first is NULL here; see violations */
  eng_violation *violations; /* the first min(cmp.violations, max_violations) */
  int n_violations;
  int has_digest;
  uint64_t digest;          /* FNV-1a 64 of the engine's output bytes */
} eng_check;

/* A timing of one engine on one case, with the forward's declared bytes. */
typedef struct {
  eng_id engine;
  const char *path;
  double ms;
  int64_t bytes;
} eng_perf;

/* Everything one case produced: the checks, and the timings of the engines that ran. */
typedef struct {
  eng_check *checks;
  int n_checks, cap_checks;
  eng_perf perf[ENG_COUNT];
  int n_perf;
  double ref_ms, gpu_ms;    /* negative when that engine did not run */
  int fault_landed;         /* the options' fault moved an element of this case's output */
  int64_t fault_elements;   /* that output's length here (-1: the engine did not produce it) */
} eng_case_result;

/* Runs the batch through every engine of x and fills *r with the checks. b must be a pristine
 * (not bounds-checked), validated batch named by canon (its canonical case text), mode its
 * bounds mode and cfg the GPU forward's configuration; bwd (NULL: forward only) the backward's
 * configuration and inputs, whose outputs "weights", "momentum" (Adagrad) and "psw_grad"
 * (weighted) are held as eng_metrics says for path "backward" or, with bwd.combine=atomic,
 * "backward.atomic". Engine
 * failures become checks with status error; the return value reports only what stops tbecheck
 * (TBE_ENOMEM, an internal error). r must be freed with eng_case_result_free either way. */
tbe_status eng_run_batch(eng_ctx *x, tbe_batch *b, const char *canon, tbe_bounds_mode mode,
                         const gpu_fwd_config *cfg, const gen_bwd *bwd, eng_case_result *r);

/* eng_run_batch under n GPU forward configurations at once: the reference, the oracle and the
 * exact twins run once, the GPU engine once per cfgs[k], and r[k] (n of them, each freed with
 * eng_case_result_free) holds the checks of that configuration's GPU run against them; the
 * other engines' checks, the same for every configuration, are in r[0] alone. */
tbe_status eng_run_batch_configs(eng_ctx *x, tbe_batch *b, const char *canon,
                                 tbe_bounds_mode mode, const gpu_fwd_config *cfgs, int n,
                                 const gen_bwd *bwd, eng_case_result *r);

/* Generates the case and runs it as eng_run_batch does. A case that cannot be generated (it
 * does not fit in memory) is recorded as an error of every engine. */
tbe_status eng_run_case(eng_ctx *x, const tbe_case *c, const char *canon, eng_case_result *r);

void eng_case_result_free(eng_case_result *r);

/* Appends a blank check (status pass, nothing compared) of engine e to res and sets *out to it,
 * for a command that holds outputs itself (race.c); valid until the next append. baseline,
 * path and output must outlive res. TBE_ENOMEM if it cannot grow. */
tbe_status eng_add_check(eng_case_result *res, eng_id e, const char *baseline, const char *path,
                         const char *output, cmp_metric m, eng_check **out);

/* 1 if any check of r is a fail or an error. */
int eng_case_failed(const eng_case_result *r);

/* A monotonic clock in milliseconds: the engines' timings, and the progress line's. */
double eng_now_ms(void);

/* FNV-1a 64 of n bytes, continuing from h (start with ENG_FNV_SEED). */
#define ENG_FNV_SEED UINT64_C(0xcbf29ce484222325)
uint64_t eng_fnv1a(uint64_t h, const void *data, size_t n);

#endif
