/* engine_ext.c: the external engines (engine_ext.h): their worker's start, found on PATH or
 * through the Python driver, and their outputs read back. Not the checks (engine.c).
 */
#include "engine_ext.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backward.h"
#include "engine_worker.h"
#include "npy.h"
#include "forward_order.h"

#define ENG_EXT_MAX_BYTES (INT64_C(256) << 20) /* inputs an engine may be handed via /tmp */

/* The executable tbecheck-ext-NAME on PATH into buf; 0 when there is one. */
static int eng_ext_find(const char *name, char *buf, size_t n)
{
  const char *path = getenv("PATH");
  for (const char *p = path ? path : ""; *p;) {
    size_t len = strcspn(p, ":");
    if (len && snprintf(buf, n, "%.*s/tbecheck-ext-%s", (int)len, p, name) < (int)n &&
        access(buf, X_OK) == 0)
      return 0;
    p += len + (p[len] == ':');
  }
  return -1;
}

void eng_start_ext(eng_ctx *x, eng_id e)
{
  const char *name = eng_name(e) + 4; /* after "ext." */
  char exe[1024], greeting[512];
  char *python[] = {(char *)eng_python(), TBE_SOURCE_DIR "/harness/check/eng_ext.py",
                    (char *)name, NULL};
  char *direct[] = {exe, NULL};
  if (eng_worker_start(x, e, eng_ext_find(name, exe, sizeof exe) ? python : direct, greeting,
                       sizeof greeting))
    return;
  /* "ready order=ORDER[ version=TEXT]" */
  char order[64] = "";
  const char *o = strstr(greeting, " order="), *v = strstr(greeting, " version=");
  if (o)
    snprintf(order, sizeof order, "%.*s", (int)strcspn(o + 7, " "), o + 7);
  int id = ref_order_parse(order);
  if (id < 0) {
    snprintf(x->unavailable[e], sizeof x->unavailable[e],
             "its greeting '%.80s' declares %s%.40s%s, which ref/ has no model of (orders: "
             "normative, fbgemm_cpu, triton)", greeting, o ? "order '" : "no order=", order,
             o ? "'" : ""); /* at most 221 bytes with its precisions: it always fits */
    eng_worker_stop(x, e);
    return;
  }
  x->order[e] = id;
  snprintf(x->version[e], sizeof x->version[e], "%s", v ? v + 9 : "");
}

/* Reads dir/ext_NAME.npy into a when it exists (*have = 1), checking it holds n of want. */
static tbe_status eng_ext_read(const char *dir, const char *name, npy_dtype want, int64_t n,
                               npy_array *a, int *have)
{
  char path[700];
  snprintf(path, sizeof path, "%s/ext_%s.npy", dir, name);
  *have = access(path, F_OK) == 0;
  char file[32];
  snprintf(file, sizeof file, "ext_%s", name);
  return *have ? eng_read_npy(dir, file, want, n, a) : tbe_ok();
}

/* The lines "OUTPUT: REASON" of dir/ext_NAME.txt (declined, raised) into r->declined. */
static tbe_status eng_ext_declined(const char *dir, const char *name, eng_run *r)
{
  char path[700], line[400];
  snprintf(path, sizeof path, "%s/ext_%s.txt", dir, name);
  FILE *f = fopen(path, "r");
  if (!f)
    return errno == ENOENT ? tbe_ok()
                           : tbe_error(TBE_EIO, "declined", -1, "%s: %s", path, strerror(errno));
  tbe_status s = tbe_ok();
  while (s.code == TBE_OK && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *colon = strstr(line, ": ");
    if (!line[0])
      continue;
    if (!colon || colon - line >= (long)sizeof r->declined[0].output ||
        r->n_declined == ENG_MAX_OUT) {
      s = tbe_error(TBE_EINVAL, "declined", -1, "%s: '%.100s' is not OUTPUT: REASON", path,
                    line);
      break;
    }
    eng_declined *d = &r->declined[r->n_declined++];
    d->raised = !strcmp(name, "raised");
    snprintf(d->output, sizeof d->output, "%.*s", (int)(colon - line), line);
    snprintf(d->reason, sizeof d->reason, "%s", colon + 2);
  }
  fclose(f);
  return s;
}

/* Reads what the worker wrote for the case in dir into r. */
static tbe_status eng_ext_outputs(const char *dir, const tbe_batch *b, const tbe_layout *l,
                                  const gen_bwd *bwd, eng_run *r)
{
  enum { IDX, OFF, WARN, WHO, OUT, W, MOM, PSW, N_FILES };
  static const char *const names[N_FILES] = {"indices", "offsets", "warnings", "offender",
                                             "output", "weights", "momentum", "psw_grad"};
  npy_dtype it = npy_of_index(b->itype);
  const npy_dtype type[N_FILES] = {it, it, NPY_I8, NPY_I8, npy_of_float(b->out_dtype),
                                   npy_of_float(b->wdtype), NPY_F4, NPY_F4};
  int64_t count[N_FILES] = {b->N, l->total_B + 1, 1, 4, l->out_elems,
                            b->table_offset[b->num_tables], ref_bwd_rows(b), b->N};
  npy_array a[N_FILES];
  int have[N_FILES] = {0};
  memset(a, 0, sizeof a);
  tbe_status s = eng_ext_declined(dir, "declined", r);
  if (s.code == TBE_OK)
    s = eng_ext_declined(dir, "raised", r);
  for (int k = 0; s.code == TBE_OK && k < N_FILES; k++) {
    if (k == WHO) { /* two values for an offset offender, four for an index offender */
      char path[700];
      snprintf(path, sizeof path, "%s/ext_offender.npy", dir);
      if ((have[k] = access(path, F_OK) == 0) && (s = npy_read(path, &a[k])).code == TBE_OK &&
          (a[k].dtype != NPY_I8 || (a[k].count != 2 && a[k].count != 4)))
        s = tbe_error(TBE_EINVAL, "offender", -1, "%s holds %lld x %s, expected 2 or 4 x <i8",
                      path, (long long)a[k].count, npy_dtype_descr(a[k].dtype));
      continue;
    }
    s = eng_ext_read(dir, names[k], type[k], count[k], &a[k], &have[k]);
  }
  if (s.code == TBE_OK && have[IDX])
    s = eng_push_int(r, "indices", "bounds", COORD_POSITION, b->itype, a[IDX].data, b->N);
  if (s.code == TBE_OK && have[OFF])
    s = eng_push_int(r, "offsets", "bounds", COORD_BAG, b->itype, a[OFF].data, count[OFF]);
  if (s.code == TBE_OK && have[WARN])
    s = eng_push_int(r, "warnings", "bounds", COORD_VECTOR, TBE_I64, a[WARN].data, 1);
  if (s.code == TBE_OK && have[WHO]) {
    s = eng_push_int(r, "offender", "bounds", COORD_VECTOR, TBE_I64, a[WHO].data, a[WHO].count);
    snprintf(r->stopped, sizeof r->stopped, "its FATAL bounds check stopped the call");
  }
  if (s.code == TBE_OK && have[OUT])
    s = eng_push_output(r, b, l, a[OUT].data, NULL);
  if (s.code == TBE_OK && have[W] && bwd)
    s = eng_push_backward(r, b, bwd->cfg, a[W].data, have[MOM] ? a[MOM].data : NULL,
                          have[PSW] ? a[PSW].data : NULL);
  for (int k = 0; k < N_FILES; k++)
    npy_free(&a[k]);
  return s;
}

void eng_run_ext(eng_ctx *x, tbe_batch *b, const tbe_layout *l, const eng_job *j, eng_run *r)
{
  double t0 = eng_now_ms();
  char reply[512];
  tbe_status s = eng_worker_ask(x, j->self, b, l, j, ENG_EXT_MAX_BYTES, reply, sizeof reply);
  r->ms = eng_now_ms() - t0;
  if (s.code == TBE_OK && !strncmp(reply, "unsupported: ", 13)) {
    r->status = ENG_UNSUPPORTED;
    snprintf(r->reason, sizeof r->reason, "%.300s", reply + 13);
    return;
  }
  if (s.code == TBE_EINVAL) { /* too big to hand over */
    r->status = ENG_UNSUPPORTED;
    snprintf(r->reason, sizeof r->reason, "%s", s.message);
    return;
  }
  if (s.code == TBE_OK && strcmp(reply, "done") != 0)
    s = tbe_error(TBE_EINTERNAL, eng_name(j->self), -1, "%s",
                  strncmp(reply, "error: ", 7) ? reply : reply + 7);
  if (s.code == TBE_OK)
    s = eng_ext_outputs(x->xdir[j->self], b, l, j->bwd, r);
  if (s.code != TBE_OK)
    eng_fail_run(r, ENG_ERROR, s);
}
