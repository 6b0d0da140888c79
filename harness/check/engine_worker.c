/* engine_worker.c: the worker engines' common part (engine_worker.h): start, hand a case over
 * through the exchange directory, stop. Not the oracle's or an external engine's outputs.
 */
#include "engine_worker.h"

#include <stdio.h>
#include <string.h>

#include "backward.h"
#include "batch_files.h"
#include "exchange.h"

int eng_worker_start(eng_ctx *x, eng_id e, char *const argv[], char *greeting, size_t n)
{
  int k = 0;
  for (; k < 3 && argv[k]; k++) /* the engines' commands have at most 3 words */
    snprintf(x->argv[e][k], sizeof x->argv[e][k], "%s", argv[k]);
  for (; k < 4; k++)
    x->argv[e][k][0] = '\0';
  tbe_status s = worker_start(argv, x->opt.worker_timeout_s, &x->worker[e], greeting, n);
  if (s.code != TBE_OK) {
    snprintf(x->unavailable[e], sizeof x->unavailable[e], "%s", s.message);
    return -1;
  }
  if (strncmp(greeting, "ready", 5) != 0 || (greeting[5] && greeting[5] != ' ')) {
    snprintf(x->unavailable[e], sizeof x->unavailable[e], "%s", greeting);
    worker_stop(x->worker[e]);
    x->worker[e] = NULL;
    return -1;
  }
  s = xchg_open(eng_name(e), worker_pid(x->worker[e]), x->xdir[e], sizeof x->xdir[e]);
  if (s.code != TBE_OK) {
    snprintf(x->unavailable[e], sizeof x->unavailable[e], "%s", s.message);
    x->xdir[e][0] = '\0';
    worker_stop(x->worker[e]);
    x->worker[e] = NULL;
    return -1;
  }
  return 0;
}

/* The bytes a case's input files take. */
static int64_t eng_input_bytes(const tbe_batch *b, const tbe_layout *l, const gen_bwd *bwd)
{
  int64_t isz = (int64_t)tbe_itype_size(b->itype);
  int64_t bytes = b->table_offset[b->num_tables] * (int64_t)tbe_dtype_size(b->wdtype) +
                  (b->N + l->total_B + 1) * isz + (b->per_sample_weights ? b->N * 4 : 0);
  if (bwd)
    bytes += l->out_elems * (int64_t)tbe_dtype_size(b->out_dtype) +
             (bwd->momentum ? ref_bwd_rows(b) * 4 : 0);
  return bytes;
}

/* A worker that died on an earlier case (a crash of the engine it runs) is started again, so
 * that it loses that case only; the greeting it gives again is not read twice. */
static tbe_status eng_worker_revive(eng_ctx *x, eng_id e)
{
  if (!worker_dead(x->worker[e]))
    return tbe_ok();
  char died[200], greeting[512], words[3][sizeof x->argv[0][0]];
  snprintf(died, sizeof died, "%s", worker_dead(x->worker[e]));
  char *argv[4] = {NULL, NULL, NULL, NULL}; /* copies: eng_worker_start writes x->argv */
  for (int k = 0; k < 3 && x->argv[e][k][0]; k++)
    argv[k] = memcpy(words[k], x->argv[e][k], sizeof words[k]);
  eng_worker_stop(x, e);
  if (eng_worker_start(x, e, argv, greeting, sizeof greeting))
    return tbe_error(TBE_EIO, eng_name(e), -1, "%s, and starting it again failed: %s", died,
                     x->unavailable[e]);
  return tbe_ok();
}

tbe_status eng_worker_ask(eng_ctx *x, eng_id e, const tbe_batch *b, const tbe_layout *l,
                          const eng_job *j, int64_t max_bytes, char *reply, size_t n)
{
  tbe_status revived = eng_worker_revive(x, e);
  if (revived.code != TBE_OK)
    return revived;
  int64_t bytes = eng_input_bytes(b, l, j->bwd);
  if (bytes > max_bytes)
    return tbe_error(TBE_EINVAL, eng_name(e), -1,
                     "inputs of %lld MiB exceed the %lld MiB %s may be handed (they travel "
                     "through files)", (long long)(bytes >> 20), (long long)(max_bytes >> 20),
                     eng_name(e));
  xchg_clear(x->xdir[e]);
  /* the inputs alone: the worker computes everything else */
  tbe_status s = batch_files_inputs(x->xdir[e], b, l, j->bwd);
  if (s.code == TBE_OK)
    s = batch_files_manifest(x->xdir[e], j->canon, b, l, j->mode, j->bwd, NULL);
  if (s.code == TBE_OK)
    s = worker_ask(x->worker[e], x->xdir[e], reply, n);
  return s;
}

void eng_worker_stop(eng_ctx *x, eng_id e)
{
  if (x->xdir[e][0])
    xchg_close(x->xdir[e]); /* disarmed before the worker goes: its pid may be reused */
  worker_stop(x->worker[e]);
  x->worker[e] = NULL;
  x->xdir[e][0] = '\0';
}

tbe_status eng_read_npy(const char *dir, const char *name, npy_dtype want, int64_t n,
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
