/* engine_oracle.c: the oracle engine: a batch's inputs written as .npy files in a temporary
 * directory (named by its owner's pid: removed on SIGTERM, swept once its owner is dead), the
 * NumPy oracle's worker (eng_oracle.py) asked to run them, its outputs read back. Not the oracle.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backward.h"
#include "batch_files.h"
#include "engine_oracle.h"
#include "npy.h"

#define ENG_ORACLE_MAX_BYTES (INT64_C(256) << 20) /* inputs the oracle may be handed via /tmp */


/* ---- the temporary directory: named by its owner's pid, removed on SIGTERM ---- */

/* The directory a signal must remove (one oracle per process is armed: the last started). */
static char armed_tmp[256], armed_case[300];
static volatile sig_atomic_t armed, armed_worker;

/* Removes the files in dir (not subdirectories; the directory stays) with async-signal-safe
 * calls only (open, getdents64, unlinkat): a signal handler may call it. */
static void eng_clear_dir(const char *dir)
{
  static char buf[4096];
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return;
  long n;
  while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
    for (long at = 0; at < n;) {
      const struct {
        unsigned long long ino;
        long long off;
        unsigned short reclen;
        unsigned char type;
        char name[];
      } *e = (const void *)(buf + at);
      if (e->name[0] != '.')
        unlinkat(fd, e->name, 0);
      at += e->reclen;
    }
  close(fd);
}

/* SIGTERM, SIGINT, SIGHUP: the worker, which may be writing its outputs there, and then the
 * armed directory go; then the signal does what it did. */
static void eng_oracle_on_signal(int sig)
{
  if (armed) {
    if (armed_worker > 0 && kill((pid_t)armed_worker, SIGKILL) == 0)
      waitpid((pid_t)armed_worker, NULL, 0);
    eng_clear_dir(armed_case);
    rmdir(armed_case);
    rmdir(armed_tmp);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Catches the signals that end a run, where nobody else has claimed them. */
static void eng_oracle_arm(const char *tmp, const char *cas, int worker_id)
{
  armed = 0;
  armed_worker = worker_id;
  snprintf(armed_tmp, sizeof armed_tmp, "%s", tmp);
  snprintf(armed_case, sizeof armed_case, "%s", cas);
  armed = 1;
  static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction old;
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = eng_oracle_on_signal;
      sigemptyset(&sa.sa_mask);
      sigaction(sigs[i], &sa, NULL);
    }
  }
}

/* Removes the oracle directories under tmp that this user's dead processes left (SIGKILL gives
 * no chance to clean up): tbecheck-oracle-PID-*, PID not running. A live owner's stays. */
static void eng_oracle_sweep(const char *tmp)
{
  DIR *d = opendir(tmp);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    int pid = 0, used = 0;
    if (sscanf(e->d_name, "tbecheck-oracle-%d-%n", &pid, &used) != 1 || used == 0 || pid <= 0 ||
        pid == (int)getpid() || kill(pid, 0) == 0 || errno != ESRCH)
      continue;
    char dir[600], cas[620];
    struct stat st;
    snprintf(dir, sizeof dir, "%s/%s", tmp, e->d_name);
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
      continue;
    snprintf(cas, sizeof cas, "%s/case", dir);
    eng_clear_dir(cas);
    rmdir(cas);
    rmdir(dir);
  }
  closedir(d);
}

/* Reads dir/name.npy, which must hold n elements of type want. */
static tbe_status eng_read_npy(const char *dir, const char *name, npy_dtype want, int64_t n,
                               npy_array *a)
{
  char path[600];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  tbe_status s = npy_read(path, a);
  if (s.code == TBE_OK && (a->dtype != want || a->count != n)) {
    s = tbe_error(TBE_EINVAL, name, -1, "%s holds %lld x %s, expected %lld x %s", path,
                  (long long)a->count, npy_dtype_descr(a->dtype), (long long)n,
                  npy_dtype_descr(want));
    npy_free(a);
  }
  return s;
}

static int64_t eng_batch_bytes(const tbe_batch *b, const tbe_layout *l, const gen_bwd *bwd)
{
  int64_t isz = (int64_t)tbe_itype_size(b->itype);
  int64_t bytes = b->table_offset[b->num_tables] * (int64_t)tbe_dtype_size(b->wdtype) +
                  (b->N + l->total_B + 1) * isz + (b->per_sample_weights ? b->N * 4 : 0);
  if (bwd)
    bytes += l->out_elems * (int64_t)tbe_dtype_size(b->out_dtype) +
             (bwd->momentum ? ref_bwd_rows(b) * 4 : 0);
  return bytes;
}

/* Reads the worker's backward outputs (oracle_weights, oracle_momentum, oracle_psw_grad). */
static tbe_status eng_oracle_backward(const char *dir, const tbe_batch *b, const gen_bwd *bwd,
                                      eng_run *r)
{
  npy_dtype wt = npy_of_float(b->wdtype);
  npy_array w = {0}, m = {0}, p = {0};
  tbe_status s = eng_read_npy(dir, "oracle_weights", wt, b->table_offset[b->num_tables], &w);
  if (s.code == TBE_OK && bwd->momentum)
    s = eng_read_npy(dir, "oracle_momentum", NPY_F4, ref_bwd_rows(b), &m);
  if (s.code == TBE_OK && b->per_sample_weights)
    s = eng_read_npy(dir, "oracle_psw_grad", NPY_F4, b->N, &p);
  if (s.code == TBE_OK) {
    ref_bwd_config cfg = *bwd->cfg;
    /* the oracle adds partials in ascending order (in fp64 in atomic mode), as ref does: its
     * bits are ref's */
    cfg.combine = REF_COMBINE_DETERMINISTIC;
    s = eng_push_backward(r, b, &cfg, w.data, m.data, p.data);
  }
  npy_free(&w);
  npy_free(&m);
  npy_free(&p);
  return s;
}

/* Reads what the worker wrote for the case in dir into r. */
static tbe_status eng_oracle_outputs(const char *dir, const tbe_batch *b, const tbe_layout *l,
                                     const gen_bwd *bwd, eng_run *r)
{
  npy_dtype it = npy_of_index(b->itype), ot = npy_of_float(b->out_dtype);
  npy_array st = {0}, idx = {0}, off = {0}, out = {0};
  tbe_status s = eng_read_npy(dir, "oracle_status", NPY_I8, 7, &st);
  if (s.code == TBE_OK)
    s = eng_read_npy(dir, "oracle_indices", it, b->N, &idx);
  if (s.code == TBE_OK)
    s = eng_read_npy(dir, "oracle_offsets", it, l->total_B + 1, &off);
  if (s.code == TBE_OK) {
    /* stopped, index offender, feature, bag, position, value, warnings */
    const int64_t *v = st.data;
    tbe_status bounds = tbe_ok();
    if (v[0]) {
      bounds = tbe_error(TBE_EBOUNDS, v[1] ? "indices" : "offsets", v[4],
                         "the oracle names feature %lld, bag %lld, position %lld, value %lld",
                         (long long)v[2], (long long)v[3], (long long)v[4], (long long)v[5]);
      bounds.feature = v[2];
      bounds.bag = v[3];
      bounds.value = v[5];
    }
    s = eng_push_bounds(r, "bounds", b->itype, idx.data, b->N, off.data, l->total_B, v[6],
                        bounds);
    if (s.code == TBE_OK && !v[0])
      s = eng_read_npy(dir, "oracle_output", ot, l->out_elems, &out);
    if (s.code == TBE_OK && !v[0])
      s = eng_push_output(r, b, l, out.data, NULL);
    if (s.code == TBE_OK && !v[0] && bwd)
      s = eng_oracle_backward(dir, b, bwd, r);
  }
  npy_free(&st);
  npy_free(&idx);
  npy_free(&off);
  npy_free(&out);
  return s;
}

void eng_run_oracle(eng_ctx *x, tbe_batch *b, const tbe_layout *l, const eng_job *j, eng_run *r)
{
  int64_t bytes = eng_batch_bytes(b, l, j->bwd);
  if (bytes > ENG_ORACLE_MAX_BYTES) {
    r->status = ENG_UNSUPPORTED;
    snprintf(r->reason, sizeof r->reason,
             "inputs of %lld MiB exceed the oracle's %lld MiB (they travel through files)",
             (long long)(bytes >> 20), (long long)(ENG_ORACLE_MAX_BYTES >> 20));
    return;
  }
  eng_clear_dir(x->oracle_case);
  double t0 = eng_now_ms();
  /* the inputs alone: the worker computes everything else, and the checks hold its outputs to
   * the reference's run of this case */
  tbe_status s = batch_files_inputs(x->oracle_case, b, l, j->bwd);
  if (s.code == TBE_OK)
    s = batch_files_manifest(x->oracle_case, j->canon, b, l, j->mode, j->bwd, NULL);
  char reply[512];
  if (s.code == TBE_OK)
    s = worker_ask(x->oracle, x->oracle_case, reply, sizeof reply);
  if (s.code == TBE_OK && strcmp(reply, "done") != 0)
    s = tbe_error(TBE_EINTERNAL, "oracle", -1, "%s",
                  strncmp(reply, "error: ", 7) ? reply : reply + 7);
  if (s.code == TBE_OK)
    s = eng_oracle_outputs(x->oracle_case, b, l, j->bwd, r);
  r->ms = eng_now_ms() - t0;
  if (s.code != TBE_OK)
    eng_fail_run(r, ENG_ERROR, s);
}

const char *eng_python(void)
{
  const char *python = getenv("TBECHECK_PYTHON");
  return python && *python ? python : TBE_PYTHON;
}

void eng_start_oracle(eng_ctx *x)
{
  char *argv[] = {(char *)eng_python(),
                  TBE_SOURCE_DIR "/harness/check/eng_oracle.py", TBE_SOURCE_DIR "/ref/oracle", NULL};
  char greeting[256];
  tbe_status s = worker_start(argv, &x->oracle, greeting, sizeof greeting);
  if (s.code != TBE_OK) {
    snprintf(x->unavailable[ENG_ORACLE], sizeof x->unavailable[0], "%s", s.message);
    return;
  }
  if (strcmp(greeting, "ready") != 0) {
    snprintf(x->unavailable[ENG_ORACLE], sizeof x->unavailable[0], "%s", greeting);
    worker_stop(x->oracle);
    x->oracle = NULL;
    return;
  }
  const char *tmp = getenv("TMPDIR");
  tmp = tmp && *tmp ? tmp : "/tmp";
  eng_oracle_sweep(tmp);
  snprintf(x->oracle_tmp, sizeof x->oracle_tmp, "%s/tbecheck-oracle-%d-XXXXXX", tmp,
           (int)getpid());
  if (!mkdtemp(x->oracle_tmp)) {
    snprintf(x->unavailable[ENG_ORACLE], sizeof x->unavailable[0],
             "cannot create a temporary directory %.100s: %s", x->oracle_tmp, strerror(errno));
    x->oracle_tmp[0] = '\0';
    return;
  }
  snprintf(x->oracle_case, sizeof x->oracle_case, "%s/case", x->oracle_tmp);
  eng_oracle_arm(x->oracle_tmp, x->oracle_case, worker_pid(x->oracle));
}

void eng_stop_oracle(eng_ctx *x)
{
  if (x->oracle_tmp[0] && !strcmp(armed_tmp, x->oracle_tmp))
    armed = 0; /* before the worker goes: its pid may be reused */
  worker_stop(x->oracle);
  x->oracle = NULL;
  if (x->oracle_tmp[0]) {
    eng_clear_dir(x->oracle_case);
    rmdir(x->oracle_case);
    rmdir(x->oracle_tmp);
    x->oracle_tmp[0] = '\0';
  }
}
