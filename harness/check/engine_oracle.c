/* engine_oracle.c: the oracle engine: the NumPy oracle's worker (eng_oracle.py) handed a
 * batch's inputs through its exchange directory, its outputs read back. Not the oracle.
 */
#include <stdio.h>
#include <string.h>

#include "engine_oracle.h"
#include "engine_worker.h"
#include "npy.h"

#define ENG_ORACLE_MAX_BYTES (INT64_C(256) << 20) /* inputs the oracle may be handed via /tmp */

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
  double t0 = eng_now_ms();
  char reply[512];
  tbe_status s = eng_worker_ask(x, ENG_ORACLE, b, l, j, ENG_ORACLE_MAX_BYTES, reply, sizeof reply);
  if (s.code == TBE_EINVAL) { /* too big to hand over */
    r->status = ENG_UNSUPPORTED;
    snprintf(r->reason, sizeof r->reason, "%s", s.message);
    return;
  }
  /* the checks hold what the worker computed to the reference's run of this case */
  if (s.code == TBE_OK && strcmp(reply, "done") != 0)
    s = tbe_error(TBE_EINTERNAL, "oracle", -1, "%s",
                  strncmp(reply, "error: ", 7) ? reply : reply + 7);
  if (s.code == TBE_OK)
    s = eng_oracle_outputs(x->xdir[ENG_ORACLE], b, l, j->bwd, r);
  r->ms = eng_now_ms() - t0;
  if (s.code != TBE_OK)
    eng_fail_run(r, ENG_ERROR, s);
}

void eng_start_oracle(eng_ctx *x)
{
  char *argv[] = {(char *)eng_python(),
                  TBE_SOURCE_DIR "/harness/check/eng_oracle.py", TBE_SOURCE_DIR "/ref/oracle", NULL};
  char greeting[256];
  eng_worker_start(x, ENG_ORACLE, argv, greeting, sizeof greeting);
}
