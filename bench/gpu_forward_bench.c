/* gpu_forward_bench.c: the GPU forward's benchmark (cases/bench.cases: F1-F4, S1; with --sweep
 * the SW- shapes instead): validates against the reference, then times ours, the plain gather
 * ceiling and the copy ceiling in one run. Not a test: it prints figures and never asserts.
 *
 * usage: gpu_forward_bench [--sweep] [--only NAME,...] [--db PATH]
 *
 * Effective GB/s = (B*T*L*D*weight_bytes + B*total_D*out_bytes) / time, the FBGEMM convention;
 * the copy ceiling counts bytes read + written of a 4 GiB device-to-device cudaMemcpy. Times are
 * medians of 20 CUDA-event timings after warm-up; inputs are several times the 50 MB L2.
 * With --db PATH the figures are also recorded as perf rows (bench_db.h), for the report.
 * --only runs only the shapes named, in every section (e.g. under a profiler: each shape's first
 * gather launch is its default configuration's).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_db.h"
#include "bounds.h"
#include "case.h"
#include "gen.h"
#include "compare.h"
#include "forward.h"
#include "forward_small.h"
#include <math.h>
#include "bench_shapes.h"
#include "gather_ceiling.h"
#include "tbe_gpu.h"

enum { REPS = 20 };

/* the shapes timed, by their names in cases/bench.cases (each with bounds=none) */
static const char *const shapes[] = {"F1", "F2", "F3", "F4", "S1"};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* --only NAME,...: the shapes to run; NULL: all of them */
static const char *only_shapes;

/* Bytes a forward of b declares it moves (the FBGEMM convention): every lookup's row in the
 * weight dtype, and the pooled output in fp32; every shape here has one D. */
static double declared_bytes(const tbe_batch *b, const tbe_layout *l)
{
  return (double)b->N * b->D[0] * (double)tbe_dtype_size(b->wdtype) +
         (double)l->total_B * b->D[0] * 4;
}

static double gbps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

/* fwd.gather's word for a configuration's gather (the database's config column) */
static const char *gather_name(gpu_gather_mode m)
{
  return m == GPU_GATHER_DIRECT ? "direct" : m == GPU_GATHER_LEAN ? "lean" : "window";
}

static float median_forward(gpu_session *g, tbe_bounds_mode mode, const gpu_fwd_config *cfg,
                            int bounds_only)
{
  float t[REPS], ms;
  for (int i = 0; i < 3; i++)
    gpu_session_forward(g, mode, cfg, bounds_only, &ms);
  for (int i = 0; i < REPS; i++) {
    tbe_status st = gpu_session_forward(g, mode, cfg, bounds_only, &t[i]);
    if (st.code != TBE_OK) {
      fprintf(stderr, "forward: %s\n", st.message);
      exit(3);
    }
  }
  for (int i = 1; i < REPS; i++) /* insertion sort: 20 values */
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
      float x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  return t[REPS / 2];
}

/* Generates a case; exits with a message if it does not. */
static void make(const char *text, tbe_case **c, tbe_batch *b, tbe_layout *l)
{
  tbe_status st = case_parse(text, c);
  if (st.code == TBE_OK)
    st = case_generate(*c, b);
  if (st.code == TBE_OK)
    st = tbe_layout_init(l, b);
  if (st.code != TBE_OK) {
    fprintf(stderr, "%s: %s\n", text, st.message);
    exit(2);
  }
}

/* The reference forward of b (malloc'd, l->out_elems in the output dtype); exits if it fails. */
static void *reference(const tbe_batch *b, const tbe_layout *l)
{
  void *ref = malloc(tbe_dtype_size(b->out_dtype) * (size_t)l->out_elems);
  tbe_status st = ref ? ref_forward(b, l, ref) : tbe_error(TBE_ENOMEM, "out", -1, "no memory");
  if (st.code != TBE_OK) {
    fprintf(stderr, "reference forward: %s\n", st.message);
    exit(3);
  }
  return ref;
}

/* Elements of a GPU output that differ in any bit from the reference output ref of b. */
static int64_t mismatches(const tbe_batch *b, const tbe_layout *l, const void *ref,
                          const void *got)
{
  cmp_result r;
  cmp_init(&r, CMP_BITWISE, 0);
  cmp_bitwise(&r, b->out_dtype, ref, got, l->out_elems);
  return r.violations;
}

/* The configuration ours is timed in: the default policy, the small-table path off (its output
 * is compared by bound, not bit for bit). */
static const gpu_fwd_config def = {0, 0, 0, GPU_SMALL_OFF, GPU_GATHER_AUTO};
/* the direct gather at the policy's width, beside the default */
static const gpu_fwd_config direct_cfg = {0, 0, 0, GPU_SMALL_OFF, GPU_GATHER_DIRECT};
/* the lean window gather (fwd.gather=lean) at the policy's bags and width, beside the default:
 * the evidence for or against auto picking it */
static const gpu_fwd_config lean_cfg = {0, 0, 0, GPU_SMALL_OFF, GPU_GATHER_LEAN};

/* --sweep: every SW- shape of cases/bench.cases, one axis at a time around SW-base. Each point:
 * ours and the gather ceiling at the case's own index width on the same data, both outputs
 * checked bit for bit against one reference forward, and their time ratio (ours / ceiling: 1 is
 * level, above 1 slower). A table, and a perf row per figure with --db. */
static void run_sweep(bench_db *rec, double copy)
{
  int n;
  char **names = bench_shape_names("SW-", &n);
  printf("%-12s %10s %8s %14s %8s %9s %10s %9s %10s %9s %10s %9s  %s\n", "sweep", "ours ms",
         "GB/s", "ceiling ms", "GB/s", "ours/ceil", "direct ms", "dir/ceil", "lean4 ms",
         "lean4/ceil", "lean8 ms", "lean8/ceil",
         "check (ceiling: best of unroll 4, 8; the case's index width)");
  for (int k = 0; k < n; k++) {
    if (!bench_wanted(only_shapes, names[k]))
      continue;
    char *text = bench_shape(names[k], NULL);
    tbe_case *c;
    tbe_batch b;
    tbe_layout l;
    make(text, &c, &b, &l);
    const double bytes = declared_bytes(&b, &l);
    void *ref = reference(&b, &l);
    gpu_session *g;
    tbe_status st = gpu_session_open(&b, &l, &g);
    if (st.code != TBE_OK) {
      fprintf(stderr, "%s: %s\n", names[k], st.message);
      exit(3);
    }
    float ours = median_forward(g, TBE_BOUNDS_NONE, &def, 0);
    gpu_fwd_result r;
    gpu_session_results(g, &r);
    int64_t bad = mismatches(&b, &l, ref, r.out);
    gpu_fwd_result_free(&r);
    float direct = median_forward(g, TBE_BOUNDS_NONE, &direct_cfg, 0);
    gpu_session_results(g, &r);
    bad += mismatches(&b, &l, ref, r.out);
    gpu_fwd_result_free(&r);
    float lean[2]; /* the lean window at 4 and at 8 rows in flight (the policy picks one) */
    for (int w = 0; w < 2; w++) {
      const gpu_fwd_config lw = {0, w ? 8 : 4, 0, GPU_SMALL_OFF, GPU_GATHER_LEAN};
      lean[w] = median_forward(g, TBE_BOUNDS_NONE, &lw, 0);
      gpu_session_results(g, &r);
      bad += mismatches(&b, &l, ref, r.out);
      gpu_fwd_result_free(&r);
    }
    gpu_session_close(g);
    float ceil_ms = 0;
    int unroll = 0;
    float *cout = malloc(sizeof(float) * (size_t)l.out_elems);
    st = cout ? gather_ceiling_run(&b, &l, b.itype, REPS, &ceil_ms, &unroll, cout)
              : tbe_error(TBE_ENOMEM, "out", -1, "no memory for the ceiling's output");
    const int ceiled = st.code == TBE_OK;
    const int64_t cbad = ceiled ? mismatches(&b, &l, ref, cout) : -1;
    free(cout);
    free(ref);
    if (ceiled)
      printf("%-12s %10.3f %8.0f %9.3f (u%d) %8.0f %9.3f %10.3f %9.3f %10.3f %9.3f %10.3f %9.3f  "
             "ours %s, ceiling %s\n",
             names[k], ours, gbps(bytes, ours), ceil_ms, unroll, gbps(bytes, ceil_ms),
             ours / ceil_ms, direct, direct / ceil_ms, lean[0], lean[0] / ceil_ms, lean[1],
             lean[1] / ceil_ms, bad ? "MISMATCH" : "bit-exact", cbad ? "MISMATCH" : "bit-exact");
    else
      printf("%-12s %10.3f %8.0f %14s %8s %9s  ours %s, ceiling: %s\n", names[k], ours,
             gbps(bytes, ours), "-", "-", "-", bad ? "MISMATCH" : "bit-exact", st.message);
    fflush(stdout);
    bench_db_figure(rec, names[k], text, "gpu:forward", NULL, ours, bytes, copy);
    bench_db_figure(rec, names[k], text, "gpu:forward", "direct", direct, bytes, copy);
    bench_db_figure(rec, names[k], text, "gpu:forward", "lean width=4", lean[0], bytes, copy);
    bench_db_figure(rec, names[k], text, "gpu:forward", "lean width=8", lean[1], bytes, copy);
    if (ceiled)
      bench_db_figure(rec, names[k], text, "ceiling:gather", NULL, ceil_ms, bytes, copy);
    tbe_layout_free(&l);
    tbe_batch_free(&b);
    case_free(c);
    free(text);
  }
  bench_shape_names_free(names, n);
}

int main(int argc, char **argv)
{
  int sweep_only = 0;
  for (;;) {
    if (argc >= 2 && !strcmp(argv[1], "--sweep")) {
      sweep_only = 1;
      argv[1] = argv[0];
      argv++;
      argc--;
    } else if (argc >= 3 && !strcmp(argv[1], "--only")) {
      only_shapes = argv[2];
      argv[2] = argv[0];
      argv += 2;
      argc -= 2;
    } else
      break;
  }
  char desc[256];
  tbe_status st = gpu_probe(desc, sizeof desc);
  if (st.code != TBE_OK) {
    printf("SKIP: %s\n", st.message);
    return 0;
  }
  bench_db *rec = bench_db_open(argc, argv, "gpu_forward_bench", desc);
  double copy;
  st = gpu_copy_ceiling((size_t)4 << 30, REPS, &copy);
  if (st.code != TBE_OK) {
    fprintf(stderr, "copy ceiling: %s\n", st.message);
    return 3;
  }
  printf("# %s; %d host threads; copy ceiling %.0f GB/s (4 GiB D2D, read + write)\n", desc,
         omp_get_max_threads(), copy);
  if (sweep_only) {
    run_sweep(rec, copy);
    bench_db_close(rec);
    return 0;
  }
  printf("%-3s %10s %9s %13s %9s %13s %9s  %s\n", "", "ours ms", "GB/s", "ceil i64 ms",
         "ours/ceil", "ceil i32 ms", "ours/ceil", "check (ceil: best of unroll 4, 8)");
  static const gpu_fwd_config sweep[] = {
      {1, 4, 0, GPU_SMALL_OFF, GPU_GATHER_WINDOW}, {1, 8, 0, GPU_SMALL_OFF, GPU_GATHER_WINDOW},
      {2, 4, 0, GPU_SMALL_OFF, GPU_GATHER_WINDOW}, {2, 8, 0, GPU_SMALL_OFF, GPU_GATHER_WINDOW},
      {4, 4, 0, GPU_SMALL_OFF, GPU_GATHER_WINDOW}, {4, 8, 0, GPU_SMALL_OFF, GPU_GATHER_WINDOW},
      {0, 4, 0, GPU_SMALL_OFF, GPU_GATHER_DIRECT}, {0, 8, 0, GPU_SMALL_OFF, GPU_GATHER_DIRECT},
      {4, 4, 0, GPU_SMALL_OFF, GPU_GATHER_LEAN},   {4, 8, 0, GPU_SMALL_OFF, GPU_GATHER_LEAN},
      {1, 8, 0, GPU_SMALL_OFF, GPU_GATHER_LEAN}};
  enum { NSWEEP = sizeof sweep / sizeof sweep[0] };
  float plain[NSHAPES], swept[NSHAPES][NSWEEP];
  int64_t swept_bad[NSHAPES][NSWEEP];
  for (int k = 0; k < NSHAPES; k++) {
    if (!bench_wanted(only_shapes, shapes[k]))
      continue;
    char *text = bench_shape(shapes[k], NULL);
    tbe_case *c;
    tbe_batch b;
    tbe_layout l;
    make(text, &c, &b, &l);
    const double bytes = declared_bytes(&b, &l);
    gpu_session *g;
    st = gpu_session_open(&b, &l, &g);
    if (st.code != TBE_OK) {
      fprintf(stderr, "%s: %s\n", shapes[k], st.message);
      return 3;
    }
    float ours = plain[k] = median_forward(g, TBE_BOUNDS_NONE, &def, 0);
    gpu_fwd_result r;
    gpu_session_results(g, &r);
    void *ref = reference(&b, &l);
    int64_t bad = mismatches(&b, &l, ref, r.out);
    gpu_fwd_result_free(&r);
    for (int v = 0; v < NSWEEP; v++) {
      swept[k][v] = median_forward(g, TBE_BOUNDS_NONE, &sweep[v], 0);
      gpu_session_results(g, &r);
      swept_bad[k][v] = mismatches(&b, &l, ref, r.out);
      gpu_fwd_result_free(&r);
    }
    gpu_session_close(g);
    /* the ceiling on the same indices and offsets, read as int64 and as int32 */
    float ceil_ms[2] = {0, 0};
    int unroll[2] = {0, 0};
    int64_t cbad[2];
    float *cout = malloc(sizeof(float) * (size_t)l.out_elems);
    for (int wi = 0; wi < 2; wi++) {
      st = gather_ceiling_run(&b, &l, wi ? TBE_I32 : TBE_I64, REPS, &ceil_ms[wi], &unroll[wi],
                              cout);
      cbad[wi] = st.code == TBE_OK ? mismatches(&b, &l, ref, cout) : -1;
      if (st.code != TBE_OK)
        fprintf(stderr, "%s: ceiling: %s\n", shapes[k], st.message);
    }
    free(cout);
    free(ref);
    printf("%-3s %10.3f %9.0f %9.3f (u%d) %9.3f %9.3f (u%d) %9.3f  ours %s, ceiling %s, %s\n",
           shapes[k], ours, gbps(bytes, ours), ceil_ms[0], unroll[0], ours / ceil_ms[0],
           ceil_ms[1], unroll[1], ours / ceil_ms[1], bad ? "MISMATCH" : "bit-exact",
           cbad[0] ? "MISMATCH" : "bit-exact", cbad[1] ? "MISMATCH" : "bit-exact");
    fflush(stdout);
    bench_db_figure(rec, shapes[k], text, "gpu:forward", NULL, ours, bytes, copy);
    bench_db_figure(rec, shapes[k], text, "ceiling:gather", NULL, ceil_ms[0], bytes, copy);
    bench_db_figure(rec, shapes[k], text, "ceiling:gather", "itype=i32", ceil_ms[1], bytes, copy);
    for (int v = 0; v < NSWEEP; v++) {
      char config[32];
      snprintf(config, sizeof config, "%s bags=%d width=%d", gather_name(sweep[v].gather),
               sweep[v].bags, sweep[v].width);
      bench_db_figure(rec, shapes[k], text, "gpu:forward", config, swept[k][v], bytes, copy);
    }
    tbe_layout_free(&l);
    tbe_batch_free(&b);
    case_free(c);
    free(text);
  }

  printf("\n%-3s", "ms");
  for (int v = 0; v < NSWEEP; v++)
    if (sweep[v].gather == GPU_GATHER_DIRECT)
      printf("   direct w=%d", sweep[v].width);
    else
      printf(" %-6.6s %dx%d", sweep[v].gather == GPU_GATHER_LEAN ? "lean" : "window",
             sweep[v].bags, sweep[v].width);
  printf("   (configuration sweep, bounds NONE; ! : not bit-exact)\n");
  for (int k = 0; k < NSHAPES; k++) {
    if (!bench_wanted(only_shapes, shapes[k]))
      continue;
    printf("%-3s", shapes[k]);
    for (int v = 0; v < NSWEEP; v++)
      printf(" %11.3f%c", swept[k][v], swept_bad[k][v] ? '!' : ' ');
    printf("\n");
  }

  /* the small-table tensor-core path vs the generic path on S1 with bags of 32 to 1024 rows
   * (up to 256 every position goes through the histogram, past it the tail): the auto policy's
   * evidence */
  static const char *const small_shapes[] = {"S1-L32", "S1-L64", "S1", "S1-L256", "S1-L1024"};
  printf("\n");
  for (size_t k = 0; k < sizeof small_shapes / sizeof small_shapes[0]; k++) {
    if (!bench_wanted(only_shapes, small_shapes[k]))
      continue;
    char *text = bench_shape(small_shapes[k], NULL);
    tbe_case *c;
    tbe_batch b;
    tbe_layout l;
    make(text, &c, &b, &l);
    const double bytes = declared_bytes(&b, &l);
    gpu_session *g;
    if (gpu_session_open(&b, &l, &g).code != TBE_OK)
      return 3;
    gpu_fwd_config on = def;
    on.small = GPU_SMALL_ON;
    float generic = median_forward(g, TBE_BOUNDS_NONE, &def, 0);
    float tc = median_forward(g, TBE_BOUNDS_NONE, &on, 0);
    gpu_fwd_result r;
    gpu_session_results(g, &r);
    float *model = malloc(sizeof(float) * (size_t)l.out_elems);
    double *exact = malloc(sizeof(double) * (size_t)l.out_elems);
    double *bound = malloc(sizeof(double) * (size_t)l.out_elems);
    ref_forward_small_model(&b, &l, r.small_mask, model);
    ref_forward_exact_tc(&b, &l, r.small_mask, exact, bound);
    int64_t same = 0, outside = 0;
    double worst = 0;
    for (int64_t i = 0; i < l.out_elems; i++) {
      float v = ((float *)r.out)[i];
      same += memcmp(&v, &model[i], sizeof v) == 0;
      double e = fabs((double)v - exact[i]);
      outside += !(e <= bound[i]);
      if (bound[i] > 0 && e / bound[i] > worst)
        worst = e / bound[i];
    }
    printf("S1 L=%d small-table path %.3f ms (%.0f GB/s) vs generic %.3f ms: small/generic %.3f; "
           "%lld of %lld outside the bound (worst error/bound %.3g); %.2f%% equal to the model\n",
           (int)(b.N / l.total_B), tc, gbps(bytes, tc), generic, tc / generic,
           (long long)outside, (long long)l.out_elems, worst,
           100.0 * (double)same / (double)l.out_elems);
    bench_db_figure(rec, small_shapes[k], text, "gpu:forward.small", NULL, tc, bytes, copy);
    free(model);
    free(exact);
    free(bound);
    gpu_fwd_result_free(&r);
    gpu_session_close(g);
    tbe_layout_free(&l);
    tbe_batch_free(&b);
    case_free(c);
    free(text);
  }

  /* what checking costs: 1% invalid indices, WARNING, on F1 and F4; plain is the clean
   * shape's time above (NONE must never see an invalid index); offsets pass: the fused
   * configuration's bounds alone, its only work outside the gather */
  printf("\n%-3s %12s %12s %12s %12s %12s  (ms, 1%% invalid indices, WARNING)\n", "", "plain",
         "unfused all", "bounds only", "offsets pass", "fused");
  const int with_check[] = {0, 3}; /* F1, F4 */
  for (int k = 0; k < 2; k++) {
    if (!bench_wanted(only_shapes, shapes[with_check[k]]))
      continue;
    /* the shape's keys before its bounds=none (a later bounds key would be a duplicate) */
    char *shape = bench_shape(shapes[with_check[k]], NULL), text[512];
    snprintf(text, sizeof text, "%.*s invalid=0.01 bounds=warning seed=9",
             (int)(strstr(shape, " bounds=") - shape), shape);
    free(shape);
    tbe_case *c;
    tbe_batch b;
    tbe_layout l;
    make(text, &c, &b, &l);
    gpu_session *g;
    if (gpu_session_open(&b, &l, &g).code != TBE_OK)
      return 3;
    gpu_fwd_config fused = def, fused_direct = direct_cfg, fused_lean = lean_cfg;
    fused.fused_bounds = fused_direct.fused_bounds = fused_lean.fused_bounds = 1;
    float unfused = median_forward(g, TBE_BOUNDS_WARNING, &def, 0);
    float only = median_forward(g, TBE_BOUNDS_WARNING, &def, 1);
    float opass = median_forward(g, TBE_BOUNDS_WARNING, &fused, 1);
    float fzd = median_forward(g, TBE_BOUNDS_WARNING, &fused_direct, 0);
    gpu_fwd_result r;
    gpu_session_results(g, &r);
    const long long warned_direct = (long long)r.warnings;
    void *out_direct = r.out;
    r.out = NULL;
    gpu_fwd_result_free(&r);
    float fzl = median_forward(g, TBE_BOUNDS_WARNING, &fused_lean, 0);
    gpu_session_results(g, &r);
    const long long warned_lean = (long long)r.warnings;
    void *out_lean = r.out;
    r.out = NULL;
    gpu_fwd_result_free(&r);
    float fz = median_forward(g, TBE_BOUNDS_WARNING, &fused, 0);
    gpu_session_results(g, &r);
    int64_t w = 0;
    ref_bounds_check(&b, &l, TBE_BOUNDS_WARNING, &w);
    void *ref = reference(&b, &l);
    int64_t bad = mismatches(&b, &l, ref, r.out), bad_direct = mismatches(&b, &l, ref, out_direct);
    const int64_t bad_lean = mismatches(&b, &l, ref, out_lean);
    free(ref);
    free(out_direct);
    free(out_lean);
    const long long warned = (long long)r.warnings;
    gpu_fwd_result_free(&r);
    gpu_session_close(g);
    /* the plain forward on this very data once repaired (b is now the reference's repair):
     * fused/plain on the same indices, apart from the clean shape's other draw */
    if (gpu_session_open(&b, &l, &g).code != TBE_OK)
      return 3;
    float same = median_forward(g, TBE_BOUNDS_NONE, &def, 0);
    float same_direct = median_forward(g, TBE_BOUNDS_NONE, &direct_cfg, 0);
    float same_lean = median_forward(g, TBE_BOUNDS_NONE, &lean_cfg, 0);
    gpu_session_close(g);
    printf("%-3s %12.3f %12.3f %12.3f %12.3f %12.3f  fused/plain %.3f (same data: plain %.3f, "
           "%.3f); fused %s, counter %lld vs ref %lld\n",
           shapes[with_check[k]], plain[with_check[k]], unfused, only, opass, fz,
           fz / plain[with_check[k]], same, fz / same, bad ? "MISMATCH" : "bit-exact", warned,
           (long long)w);
    printf("%-3s direct: fused %.3f, plain on the same data %.3f: fused/plain %.3f; fused %s, "
           "counter %lld\n",
           shapes[with_check[k]], fzd, same_direct, fzd / same_direct,
           bad_direct ? "MISMATCH" : "bit-exact", warned_direct);
    printf("%-3s lean: fused %.3f, plain on the same data %.3f: fused/plain %.3f, fused/window "
           "plain %.3f; fused %s, counter %lld\n",
           shapes[with_check[k]], fzl, same_lean, fzl / same_lean, fzl / same,
           bad_lean ? "MISMATCH" : "bit-exact", warned_lean);
    tbe_layout_free(&l);
    tbe_batch_free(&b);
    case_free(c);
  }
  bench_db_close(rec);
  return 0;
}
