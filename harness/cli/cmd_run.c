/* cmd_run.c: the commands that run cases through the engines: run (case files and texts),
 * import (a captured batch as .npy files) and replay (one case, each comparison shown). Not
 * the engines (check/) nor the session they share (session.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_run.h"
#include "gen.h"
#include "gpus.h"
#include "session.h"

static const char run_usage[] =
    "usage: tbecheck run [CASEFILE|CASE|- ...] [--db PATH] [--engines LIST] [--repeat N]\n"
    "                    [--shard I/N|auto] [--campaign ID] [--max-violations N]\n"
    "                    [--inject-fault ENGINE:OUTPUT[@I]] [--max-memory SIZE] [--engine-timeout S]\n"
    "                    [--gpus all|N | --gpu-ids I,J,...]\n"
    "Runs every case through the engines, compares each engine output with its baseline and\n"
    "stores the outcome in the database, one transaction per case; ends with a summary per\n"
    "engine pair and path, and a warning for each engine that could not run here. All cases\n"
    "are parsed, and their memory estimated, before anything runs. '-' reads a case file from\n"
    "standard input (a generator's pipe), to its end.\n"
    "  --db PATH              results database (default ./" DEFAULT_DB ")\n"
    "  --engines LIST         comma-separated, from ref,gpu,oracle (default all; ref always)\n"
    "  --repeat N             run each case N times (flaky outputs show in flaky.sql)\n"
    "  --shard I/N            run only cases I, I+N, I+2N, ... (1-based) of the list; auto:\n"
    "                         I/N from Slurm (the job array's task, or SLURM_PROCID/NTASKS)\n"
    "  --campaign ID          the campaign the run belongs to (letters, digits, . _ : -; at\n"
    "                         most 64): merged shards of one campaign report as one. Default\n"
    "                         with --shard: derived from the commit, N, the engines, the repeats\n"
    "                         and every case, so the shards of one command line agree\n"
    "  --max-violations N     violations stored per result (default 10)\n"
    "  --engine-timeout S     the longest a worker engine (oracle, ext.NAME) may take to reply\n"
    "                         to one case (default 1800; 0: none): then it is killed, that\n"
    "                         case is its error, and a new worker takes the next\n"
    "  --inject-fault E:O[@I] test the tester: move element I (default 0) of engine E's\n"
    "                         output O by one ulp (integers: by one); the run must then fail.\n"
    "                         The run is marked injected (kept out of drift, flaky, worst);\n"
    "                         a fault that lands in no case is bad usage (exit 2)\n"
    "  --max-memory SIZE      memory a case may need (bytes, or with K, M, G, T); default:\n"
    "                         what this machine has available (MemAvailable, cgroup limit)\n"
    "  --gpus all|N           one worker per GPU (all, or the first N nvidia-smi lists),\n"
    "                         pinned with CUDA_VISIBLE_DEVICES, each on its shard and its\n"
    "                         share of the cores; their databases merged into --db at the end\n"
    "                         (one campaign; runs.gpu_uuid says which GPU ran which case). A\n"
    "                         worker that dies loses its current case: the others go on\n"
    "  --gpu-ids I,J,...      the same on the GPUs of these nvidia-smi indices\n"
    "Exit 0 all passed, 1 failures, 2 bad input, 3 I/O error (the run stays incomplete).\n";

static const char import_usage[] =
    "usage: tbecheck import DIR [--pool sum|mean|none] [--out fp32|fp16|bf16]\n"
    "                       [--bounds fatal|warning|ignore|none] [--db PATH] [--engines LIST]\n"
    "                       [--max-violations N] [--inject-fault ENGINE:OUTPUT[@I]]\n"
    "                       [--engine-timeout S]\n"
    "Runs a captured batch given as .npy files in DIR (harness/store/import.h: weights, E, D,\n"
    "indices and offsets required; table_offset, feature_table_map, B_vbe, per_sample_weights\n"
    "optional) through the engines and stores it as a run of one case, named by a digest of the\n"
    "files. Defaults: --pool sum --out fp32 --bounds warning. README.md lists the files.\n";

static const char replay_usage[] =
    "usage: tbecheck replay ID|CASE|--result N [--db PATH] [--engines LIST] [--max-violations N]\n"
    "                       [--inject-fault ENGINE:OUTPUT[@I]] [--max-memory SIZE]\n"
    "                       [--engine-timeout S]\n"
    "Reruns one case (a case text, the id or hash of a case in the database, or with --result\n"
    "the case of result N: list's first column) and prints every comparison in detail with its\n"
    "first violations at their coordinates: (t, b, d) for pooled outputs, (p, d) for pooling\n"
    "NONE, p for indices, bag for offsets. Stores nothing.\n"
    "Exit 0 all passed, 1 failures, 2 bad input, 3 I/O error.\n";


int cmd_run(int argc, char **argv)
{
  static const int allowed[] = {OPT_DB,     OPT_ENGINES,  OPT_REPEAT, OPT_SHARD,
                                OPT_MAXV,   OPT_FAULT,    OPT_MAXMEM, OPT_CAMPAIGN,
                                OPT_GPUS,   OPT_GPU_IDS,  OPT_TIMEOUT, 0};
  cli_options o;
  int rc = parse_options(argc, argv, run_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (optind >= argc) {
    say_error("give at least one case file or case");
    return usage_error(run_usage);
  }
  parsed_case *all = NULL;
  int64_t n = 0;
  rc = collect_cases(argc - optind, argv + optind, &all, &n);
  if (rc >= 0) {
    free_cases(all, n);
    return rc;
  }
  if (o.shard_n && !o.campaign) {
    char head[96];
    int len = snprintf(head, sizeof head, "%lld %d %u", o.shard_n, o.repeat,
                       (unsigned)o.eng.engines);
    uint64_t h = eng_fnv1a(ENG_FNV_SEED, head, (size_t)len);
    for (int64_t i = 0; i < n; i++)
      h = eng_fnv1a(h, all[i].canon, strlen(all[i].canon) + 1);
    o.campaign_cases = h | 1; /* never 0: 0 means none */
  }
  if (o.gpus || o.gpu_ids) {
    for (int64_t i = 0; rc < 0 && i < n; i++)
      rc = check_memory(all[i].c, all[i].canon, &o);
    rc = rc >= 0 ? rc : run_on_gpus(&o, all, n);
    free_cases(all, n);
    return rc;
  }
  int64_t mine = 0; /* this shard's cases, moved to the front */
  for (int64_t i = 0; i < n; i++) {
    parsed_case p = all[i];
    if (!o.shard_n || i % o.shard_n == o.shard_i - 1) {
      all[i] = all[mine];
      all[mine++] = p;
    }
  }
  for (int64_t i = 0; rc < 0 && i < mine; i++)
    rc = check_memory(all[i].c, all[i].canon, &o);
  session s = {0};
  if (rc < 0)
    rc = session_open(&s, &o, argc, argv, mine * o.repeat);
  for (int64_t i = 0; rc < 0 && i < mine; i++)
    for (int k = 0; rc < 0 && k < o.repeat; k++) {
      eng_case_result r;
      tbe_status st = eng_run_case(s.x, all[i].c, all[i].canon, &r);
      rc = st.code == TBE_OK ? session_case(&s, all[i].canon, k, &r) : fail_with(st);
      eng_case_result_free(&r);
    }
  if (rc < 0)
    rc = session_close(&s, mine, o.repeat);
  session_free(&s);
  free_cases(all, n);
  return rc;
}

/* ---- import ---- */

int cmd_import(int argc, char **argv)
{
  static const int allowed[] = {OPT_DB, OPT_ENGINES, OPT_MAXV, OPT_FAULT, OPT_POOL, OPT_OUT,
                                OPT_BOUNDS, OPT_TIMEOUT, 0};
  cli_options o;
  int rc = parse_options(argc, argv, import_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (argc - optind != 1)
    return usage_error(import_usage);
  tbe_batch b;
  char canon[160];
  tbe_status st = import_dir(argv[optind], &o.imp, &b, canon, sizeof canon);
  if (st.code != TBE_OK)
    return fail_with(st);
  session s;
  rc = session_open(&s, &o, argc, argv, 1);
  if (rc < 0) {
    eng_case_result r;
    gpu_fwd_config cfg = {0};
    st = eng_run_batch(s.x, &b, canon, o.imp.bounds, &cfg, NULL, &r);
    rc = st.code == TBE_OK ? session_case(&s, canon, 0, &r) : fail_with(st);
    eng_case_result_free(&r);
  }
  if (rc < 0)
    rc = session_close(&s, 1, 1);
  session_free(&s);
  tbe_batch_free(&b);
  return rc;
}

/* ---- replay ---- */

static void print_check(const eng_check *c)
{
  char pair[32];
  snprintf(pair, sizeof pair, "%s:%s", eng_name(c->engine), c->baseline);
  printf("%-11s %-13s %-9s %-11s %-4s", pair, c->path, c->output, cmp_metric_name(c->metric),
         eng_status_name(c->status));
  if (c->compared) {
    const cmp_result *m = &c->cmp;
    printf("  elements %lld, bit-exact %lld, violations %lld", (long long)m->elements,
           (long long)m->exact, (long long)m->violations);
    if (m->metric == CMP_BOUND)
      printf(", worst ratio %.3e", m->worst_bound_ratio);
    else
      printf(", max ulp %lld", (long long)m->max_ulp);
    printf(", max abs %.3g, max rel %.3g", m->max_abs, m->max_rel);
  }
  putchar('\n');
  if (c->status != ENG_PASS)
    printf("    %s\n", c->reason);
  for (int i = 0; i < c->n_violations; i++) {
    const eng_violation *v = &c->violations[i];
    printf("    %-34s expected %-24.17g got %-16.9g", v->coordinates, v->v.expected, v->v.got);
    if (c->metric == CMP_BOUND)
      printf(" bound %.3g", v->v.bound);
    putchar('\n');
  }
}

int cmd_replay(int argc, char **argv)
{
  static const int allowed[] = {OPT_DB,     OPT_ENGINES, OPT_MAXV,    OPT_FAULT,
                                OPT_MAXMEM, OPT_RESULT,  OPT_TIMEOUT, 0};
  cli_options o;
  int rc = parse_options(argc, argv, replay_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (argc - optind != (o.result ? 0 : 1)) {
    if (o.result)
      say_error("--result names the case to replay: give no case or id beside it");
    return usage_error(replay_usage);
  }
  char id[24];
  snprintf(id, sizeof id, "%lld", o.result);
  const char *arg = o.result ? id : argv[optind];
  char *text = NULL;
  if (o.result || !is_case_text(arg)) {
    db *d;
    tbe_status st = db_open(o.db_path, DB_READ, &d);
    if (st.code == TBE_OK) {
      st = o.result ? db_result_case_text(d, o.result, &text) : db_case_text(d, arg, &text);
      db_close(d);
    }
    if (st.code != TBE_OK)
      return fail_with(st);
    if (!strncmp(text, "import ", 7)) {
      say_error("%s %s is an imported batch (%s): rerun it with tbecheck import DIR",
                o.result ? "the case of result" : "case", arg, text);
      free(text);
      return EXIT_USAGE;
    }
  }
  parsed_case *pc = NULL;
  int64_t n = 0;
  rc = add_case(text ? text : arg, "case", &pc, &n);
  free(text);
  if (rc >= 0)
    return rc;
  eng_ctx *x = NULL;
  rc = check_memory(pc[0].c, pc[0].canon, &o);
  if (rc < 0)
    rc = open_engines(&o, &x);
  eng_case_result r;
  tbe_status st = tbe_ok();
  if (rc < 0) {
    char hash[17];
    db_case_hash(pc[0].canon, hash);
    printf("case %s  %s\n\n", hash, pc[0].canon);
    st = eng_run_case(x, pc[0].c, pc[0].canon, &r);
    rc = st.code == TBE_OK ? -1 : fail_with(st);
  }
  if (rc < 0) {
    for (int i = 0; i < r.n_checks; i++)
      print_check(&r.checks[i]);
    fault_seen f = {0, -1};
    fault_note(&f, &r);
    rc = fault_check(&o, &f);
    if (rc < 0)
      rc = eng_case_failed(&r) ? EXIT_FAILURES : EXIT_PASS;
    eng_case_result_free(&r);
  }
  eng_close(x);
  free_cases(pc, n);
  return rc;
}

