/* gpus.c: --gpus / --gpu-ids of run, fuzz and race (gpus.h): the GPUs listed by nvidia-smi, one
 * worker process a GPU (CUDA_VISIBLE_DEVICES, its share of the cores, its shard of one case list
 * or its own seed stream), one progress line from the workers' lines, and their databases
 * merged into --db. Not the commands the workers run (cmd_run.c, fuzz_campaign.c, race.c).
 *
 * The workers share a campaign id (run --shard derives it from the same list; fuzz and race get
 * it with --campaign), and each run records its GPU's UUID (TBECHECK_GPU_UUID, runs.gpu_uuid).
 * A worker's count of cases is what its lines say: one per `pass  case` or `FAIL  case` line, or
 * the N of a `COMMAND: N cases` or `run R: N cases` line where that is more.
 */
#include "gpus.h"

#include <errno.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "progress.h"
#include "runinfo.h"

#define GPUS_MAX 64

extern char **environ;

typedef struct {
  int index;
  char uuid[80], name[96];
} gpu_dev;

/* One worker: its GPU, seed, process, output pipe, the part of a line not yet ended, its counts. */
typedef struct {
  gpu_dev gpu;
  uint64_t seed;
  pid_t pid;
  int fd; /* -1 once its output ended */
  char line[2048];
  size_t len;
  int in_block; /* the lines indented under a FAIL or BIG line belong to it */
  int64_t done, failed;
  int status;
  char db[1200];
} worker_proc;

/* The GPUs nvidia-smi lists into g (at most max); their count, or -1 with why. */
static int gpus_list(gpu_dev *g, int max, char *why, size_t n)
{
  FILE *f = popen("nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader 2>&1", "r");
  if (!f) {
    snprintf(why, n, "cannot run nvidia-smi: %s", strerror(errno));
    return -1;
  }
  char line[512], first[200] = "";
  int count = 0, bad = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = '\0';
    if (!first[0])
      snprintf(first, sizeof first, "%.190s", line);
    gpu_dev d = {0};
    int used = 0;
    if (sscanf(line, "%d, %79[^,], %n", &d.index, d.uuid, &used) != 2 || used == 0) {
      bad = 1;
      continue;
    }
    snprintf(d.name, sizeof d.name, "%s", line + used);
    if (count < max)
      g[count++] = d;
  }
  int st = pclose(f);
  if (st != 0 || bad) {
    int missing = WIFEXITED(st) && WEXITSTATUS(st) == 127;
    snprintf(why, n, "no GPU here: nvidia-smi %s%s%s", missing ? "is not on PATH" : "failed",
             first[0] && !missing ? ": " : "", missing ? "" : first);
    return -1;
  }
  return count;
}

/* The GPUs o names (one of o->gpus, o->gpu_ids), from the count listed: their number, or -1
 * (the error said). */
static int gpus_pick(const gpus_job *o, const gpu_dev *all, int count, gpu_dev *sel)
{
  if (o->gpus) {
    int n = strcmp(o->gpus, "all") ? atoi(o->gpus) : count;
    if (n > count || n == 0) {
      say_error("--gpus %s: this host has %d GPU%s (nvidia-smi)", o->gpus, count,
                count == 1 ? "" : "s");
      return -1;
    }
    memcpy(sel, all, sizeof *sel * (size_t)n);
    return n;
  }
  int n = 0;
  for (const char *p = o->gpu_ids; *p; p += *p == ',') {
    char *end;
    long id = strtol(p, &end, 10);
    int k = 0;
    while (k < count && all[k].index != id)
      k++;
    if (end == p || k == count || n == GPUS_MAX) {
      say_error("--gpu-ids %s: %.*s is not a GPU of this host (nvidia-smi lists %d)",
                o->gpu_ids, end == p ? 1 : (int)(end - p), p, count);
      return -1;
    }
    for (int i = 0; i < n; i++)
      if (sel[i].index == id) {
        say_error("--gpu-ids %s: GPU %ld is named twice", o->gpu_ids, id);
        return -1;
      }
    sel[n++] = all[k];
    p = end;
  }
  return n;
}

/* environ with CUDA_VISIBLE_DEVICES, TBECHECK_GPU_UUID and (unless set) OMP_NUM_THREADS set for
 * worker w; the strings live in store. */
static char **worker_env(const worker_proc *w, int threads, char store[3][128])
{
  size_t n = 0;
  while (environ[n])
    n++;
  char **env = calloc(n + 4, sizeof *env);
  if (!env)
    return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) &&
        strncmp(environ[i], "TBECHECK_GPU_UUID=", 18))
      env[k++] = environ[i];
  snprintf(store[0], 128, "CUDA_VISIBLE_DEVICES=%d", w->gpu.index);
  snprintf(store[1], 128, "TBECHECK_GPU_UUID=%s", w->gpu.uuid);
  snprintf(store[2], 128, "OMP_NUM_THREADS=%d", threads);
  env[k++] = store[0];
  env[k++] = store[1];
  if (!getenv("OMP_NUM_THREADS")) /* the host's cores shared among the workers */
    env[k++] = store[2];
  env[k] = NULL;
  return env;
}

#define WORKER_ARGS 48 /* room for a worker's argv: the job's args and the ones added here */

/* Starts worker k of n as gpus.h says: list is the case list's path (NULL: seeded), campaign
 * the id every worker gets (NULL: none). */
static int worker_spawn(worker_proc *w, int k, int n, const gpus_job *j, const char *list,
                        const char *campaign, int threads)
{
  char exe[1100], split[32];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) {
    say_error("cannot find this tbecheck's executable: %s", strerror(errno));
    return -1;
  }
  exe[len] = '\0';
  char *argv[WORKER_ARGS] = {exe, (char *)j->command};
  int a = 2;
  if (list)
    argv[a++] = (char *)list;
  for (int i = 0; j->args[i] && a < WORKER_ARGS - 7; i++)
    argv[a++] = (char *)j->args[i];
  argv[a++] = "--db";
  argv[a++] = w->db;
  argv[a++] = list ? "--shard" : "--seed";
  if (list)
    snprintf(split, sizeof split, "%d/%d", k + 1, n);
  else
    snprintf(split, sizeof split, "%llu", (unsigned long long)w->seed);
  argv[a++] = split;
  if (campaign) {
    argv[a++] = "--campaign";
    argv[a++] = (char *)campaign;
  }
  argv[a] = NULL;
  int fds[2];
  if (pipe(fds) != 0) {
    say_error("pipe: %s", strerror(errno));
    return -1;
  }
  char store[3][128];
  char **env = worker_env(w, threads, store);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  int err = env ? posix_spawn(&w->pid, exe, &fa, NULL, argv, env) : ENOMEM;
  posix_spawn_file_actions_destroy(&fa);
  free(env);
  close(fds[1]);
  if (err) {
    close(fds[0]);
    say_error("cannot start the worker for GPU %d: %s", w->gpu.index, strerror(err));
    return -1;
  }
  w->fd = fds[0];
  return 0;
}

/* One line of worker w of the job's command: counted (the file's header says how), and shown
 * when it reports a failure or a draw too big for the time (the FAIL or BIG line and the
 * indented lines under it), a warning, or on a pipe a case of run that passed. */
static void worker_line(worker_proc *w, const char *command, const char *line, int live)
{
  int pass = !strncmp(line, "pass  case ", 11), fail = !strncmp(line, "FAIL  case ", 11);
  w->done += pass || fail;
  w->failed += fail;
  char who[16];
  long long run, cases;
  int used = 0;
  if ((sscanf(line, "%15[a-z]: %lld case%n", who, &cases, &used) == 2 && used &&
       !strcmp(who, command)) ||
      (used = 0, sscanf(line, "run %lld: %lld case%n", &run, &cases, &used) == 2 && used))
    w->done = cases > w->done ? cases : w->done;
  w->in_block = fail || !strncmp(line, "BIG   ", 6) ||
                (w->in_block && !strncmp(line, "      ", 6));
  if (w->in_block || !strncmp(line, "warning: ", 9) || (!live && pass && !strcmp(command, "run"))) {
    if (live)
      printf("\r\033[K");
    printf("gpu %d: %s\n", w->gpu.index, line);
  }
}

/* The progress line of the whole campaign: run's done/total and ETA, or the cases, failures
 * and time left of fuzz and race. */
static void progress_line(const gpus_job *j, const worker_proc *w, int n, double t0,
                          char *buf, size_t len)
{
  progress p;
  progress_start(&p, j->ncases * j->repeat, t0);
  for (int k = 0; k < n; k++) {
    p.done += w[k].done;
    p.failed += w[k].failed;
  }
  double now = eng_now_ms(), secs = (now - t0) / 1000;
  int used = 0;
  if (j->cases)
    used = progress_format(&p, now, buf, len);
  else
    used = snprintf(buf, len, "%s: %lld cases, %.1f cases/s, %lld failed, %.0f s left",
                    j->command, (long long)p.done, secs > 0 ? (double)p.done / secs : 0.0,
                    (long long)p.failed, secs < j->seconds ? j->seconds - secs : 0.0);
  if (used >= 0 && (size_t)used < len)
    snprintf(buf + used, len - (size_t)used, " (%d GPU%s)", n, n == 1 ? "" : "s");
}

/* Reads what the workers write until every one has closed its output, then reaps them. */
static void workers_follow(const gpus_job *j, worker_proc *w, int n)
{
  int live = isatty(STDOUT_FILENO);
  double t0 = eng_now_ms(), shown = t0;
  for (int open = n; open > 0;) {
    struct pollfd pf[GPUS_MAX];
    int map[GPUS_MAX], m = 0;
    for (int k = 0; k < n; k++)
      if (w[k].fd >= 0) {
        pf[m] = (struct pollfd){w[k].fd, POLLIN, 0};
        map[m++] = k;
      }
    if (poll(pf, (nfds_t)m, 1000) < 0 && errno != EINTR)
      break;
    for (int i = 0; i < m; i++) {
      worker_proc *x = &w[map[i]];
      if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      ssize_t got = read(x->fd, x->line + x->len, sizeof x->line - 1 - x->len);
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0) {
        close(x->fd);
        x->fd = -1;
        open--;
        continue;
      }
      x->len += (size_t)got;
      char *nl;
      while ((nl = memchr(x->line, '\n', x->len)) || x->len == sizeof x->line - 1) {
        size_t used = nl ? (size_t)(nl - x->line) + 1 : x->len;
        x->line[used - (nl != NULL)] = '\0';
        worker_line(x, j->command, x->line, live);
        memmove(x->line, x->line + used, x->len - used);
        x->len -= used;
      }
    }
    double now = eng_now_ms();
    if (live || (!j->cases && now - shown > 5000)) { /* a pipe: fuzz's and race's pace */
      shown = now;
      char line[200];
      progress_line(j, w, n, t0, line, sizeof line);
      printf(live ? "\r\033[K%s" : "%s\n", line);
    }
    fflush(stdout);
  }
  if (live)
    printf("\r\033[K");
  for (int k = 0; k < n; k++) /* a worker still writing (poll failed) must not block on it */
    if (w[k].fd >= 0) {
      close(w[k].fd);
      w[k].fd = -1;
    }
  for (int k = 0; k < n; k++)
    while (waitpid(w[k].pid, &w[k].status, 0) < 0 && errno == EINTR)
      ;
}

/* Writes the canonical cases into path, one a line: every worker reads the same list. */
static int write_cases(const char *path, const parsed_case *all, int64_t n)
{
  FILE *f = fopen(path, "w");
  for (int64_t i = 0; f && i < n; i++)
    fprintf(f, "%s\n", all[i].canon);
  if (!f || fclose(f) != 0) {
    say_error("cannot write the case list %s: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* How worker w ended, for a message; "" when it ended as its command does after its work
 * (0, or 1 for failures). */
static void worker_end(const worker_proc *w, char *buf, size_t n)
{
  buf[0] = '\0';
  if (WIFSIGNALED(w->status))
    snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(w->status),
             strsignal(WTERMSIG(w->status)));
  else if (WIFEXITED(w->status) && WEXITSTATUS(w->status) > 1)
    snprintf(buf, n, "exited with status %d", WEXITSTATUS(w->status));
}

/* Merges the workers' databases into j->db_path, then prints each GPU's share and the
 * campaign's summary; a database that `created` made and no worker wrote into is removed.
 * Returns the exit code. */
static int workers_merge(const gpus_job *j, worker_proc *w, int n, const char *dir, int created)
{
  db *d = NULL;
  tbe_status st = db_open(j->db_path, DB_WRITE, &d);
  if (st.code != TBE_OK) {
    say_error("the workers' databases are kept in %s: %s", dir, st.message);
    return st.code == TBE_EINVAL ? EXIT_USAGE : EXIT_INTERNAL;
  }
  int rc = EXIT_PASS, kept = 0, wrote = 0;
  int64_t failed = 0;
  printf("\n");
  for (int k = 0; k < n; k++) {
    char end[160], seed[40] = "";
    worker_end(&w[k], end, sizeof end);
    int added = 0, open_runs = 0;
    struct stat sb;
    int has_db = stat(w[k].db, &sb) == 0;
    wrote |= has_db;
    st = has_db ? db_merge(d, w[k].db, &added, &open_runs) : tbe_ok();
    if (!j->cases)
      snprintf(seed, sizeof seed, " seed %llu:", (unsigned long long)w[k].seed);
    printf("gpu %d (%s, %s):%s %lld cases, %lld failed%s%s\n", w[k].gpu.index, w[k].gpu.uuid,
           w[k].gpu.name, seed, (long long)w[k].done, (long long)w[k].failed,
           end[0] ? "; it " : "", end);
    failed += w[k].failed;
    if (st.code != TBE_OK) {
      say_error("cannot merge %s: %s (kept)", w[k].db, st.message);
      kept = 1;
      rc = EXIT_INTERNAL;
    } else if (has_db) {
      db_remove_files(w[k].db);
    }
    if (end[0] || open_runs) {
      say_error("the worker on GPU %d %s: the cases it finished are kept, its run stays "
                "incomplete", w[k].gpu.index, end[0] ? end : "did not finish its run");
      rc = EXIT_INTERNAL;
    }
  }
  db_table t;
  db_param p = {":campaign", NULL, 1}; /* :run unbound: the last run, one of the campaign's */
  st = wrote ? db_query(d, "summary", &p, 1, &t) : tbe_ok();
  if (!wrote) {
    printf("\n%s on %d GPU%s: no worker stored anything%s\n", j->command, n, n == 1 ? "" : "s",
           created ? "; no database written" : "");
  } else if (st.code == TBE_OK) {
    printf("\ncampaign on %d GPU%s: %lld failed; results in %s\n\n", n, n == 1 ? "" : "s",
           (long long)failed, j->db_path);
    print_table(&t, 0);
    db_table_free(&t);
  } else {
    say_error("cannot summarize the campaign: %s", st.message);
  }
  db_close(d);
  if (!wrote && created)
    db_remove_files(j->db_path);
  if (!kept)
    rmdir(dir);
  return rc != EXIT_PASS ? rc : failed ? EXIT_FAILURES : EXIT_PASS;
}

const char *gpus_worker_uuid(void)
{
  const char *u = getenv("TBECHECK_GPU_UUID");
  return u && *u ? u : NULL;
}

uint64_t gpus_seed(uint64_t seed, int k, int n) { return seed * (uint64_t)n + (uint64_t)k; }

/* The campaign id of seeded workers: FNV-1a of the command, its args, N and the seed, then the
 * commit (as run --shard's), into buf (17 bytes). */
static void seeded_campaign(const gpus_job *j, int n, char *buf, size_t len)
{
  char head[64];
  int k = snprintf(head, sizeof head, "%s %d %llu", j->command, n, (unsigned long long)j->seed);
  uint64_t h = eng_fnv1a(ENG_FNV_SEED, head, (size_t)k);
  for (int i = 0; j->args[i]; i++)
    h = eng_fnv1a(h, j->args[i], strlen(j->args[i]) + 1);
  runinfo ri;
  runinfo_collect(&ri);
  snprintf(buf, len, "%016llx",
           (unsigned long long)eng_fnv1a(h, ri.git_commit, strlen(ri.git_commit)));
}

int gpus_campaign(const gpus_job *j)
{
  gpu_dev listed[GPUS_MAX], sel[GPUS_MAX];
  char why[400];
  if (j->gpus && j->gpu_ids) {
    say_error("--gpus and --gpu-ids name the GPUs twice: give one of them");
    return EXIT_USAGE;
  }
  int count = gpus_list(listed, GPUS_MAX, why, sizeof why);
  if (count < 0) {
    say_error("--%s: %s", j->gpus ? "gpus" : "gpu-ids", why);
    return EXIT_USAGE;
  }
  int g = gpus_pick(j, listed, count, sel);
  if (g < 0)
    return EXIT_USAGE;
  int created = access(j->db_path, F_OK) != 0;
  db *d = NULL; /* refused here, before any worker starts, if it cannot be written */
  tbe_status st = db_open(j->db_path, DB_WRITE, &d);
  db_close(d);
  if (st.code != TBE_OK)
    return fail_with(st);
  char dir[1100];
  if (snprintf(dir, sizeof dir, "%s.gpus-XXXXXX", j->db_path) >= (int)sizeof dir) {
    say_error("the database path is too long: %s", j->db_path);
    return EXIT_USAGE;
  }
  if (!mkdtemp(dir)) {
    say_error("cannot create a directory beside %s for the workers: %s", j->db_path,
              strerror(errno));
    return EXIT_INTERNAL;
  }
  char list[1200], campaign[80];
  snprintf(list, sizeof list, "%.1100s/cases.txt", dir);
  if (j->cases && write_cases(list, j->cases, j->ncases))
    return EXIT_INTERNAL;
  if (!j->cases && !j->campaign)
    seeded_campaign(j, g, campaign, sizeof campaign);
  else
    snprintf(campaign, sizeof campaign, "%s", j->campaign ? j->campaign : "");
  worker_proc *w = calloc((size_t)g, sizeof *w);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = cores > g ? (int)(cores / g) : 1;
  int started = 0, rc = -1;
  for (int k = 0; w && k < g && rc < 0; k++) {
    w[k].gpu = sel[k];
    w[k].seed = gpus_seed(j->seed, k, g);
    snprintf(w[k].db, sizeof w[k].db, "%.1100s/gpu%d.db", dir, sel[k].index);
    if (worker_spawn(&w[k], k, g, j, j->cases ? list : NULL, campaign[0] ? campaign : NULL,
                     threads))
      rc = EXIT_INTERNAL;
    else
      started++;
  }
  if (!w)
    rc = EXIT_INTERNAL;
  workers_follow(j, w, started);
  if (j->cases)
    unlink(list);
  int merged = w ? workers_merge(j, w, started, dir, created) : EXIT_INTERNAL;
  free(w);
  return rc >= 0 ? rc : merged;
}

int run_on_gpus(const cli_options *o, const parsed_case *all, int64_t n)
{
  if (o->shard_n || o->eng.fault_output[0]) {
    say_error("--gpus and --gpu-ids shard the run themselves and hold no fault: run %s without "
              "them", o->shard_n ? "--shard" : "--inject-fault");
    return EXIT_USAGE;
  }
  char repeat[16], maxv[16], timeout[16], maxmem[32], engines[256];
  snprintf(repeat, sizeof repeat, "%d", o->repeat);
  snprintf(maxv, sizeof maxv, "%d", o->eng.max_violations);
  snprintf(timeout, sizeof timeout, "%d", o->eng.worker_timeout_s);
  snprintf(maxmem, sizeof maxmem, "%lld", o->max_memory);
  eng_format_list(o->eng.engines, engines, sizeof engines);
  const char *args[] = {"--repeat", repeat, "--max-violations", maxv, "--engine-timeout",
                        timeout, "--engines", engines, o->max_memory ? "--max-memory" : NULL,
                        maxmem, NULL}; /* NULL ends it */
  gpus_job j = {.command = "run", .gpus = o->gpus, .gpu_ids = o->gpu_ids, .db_path = o->db_path,
                .campaign = o->campaign, .args = args, .cases = all, .ncases = n,
                .repeat = o->repeat};
  return gpus_campaign(&j);
}
