/* engine_ref.c: the ref engine (bounds check, forward, backward on the CPU reference) and the
 * reference backward's runners that export (store/) and the benches share. Not the checks.
 */
#include "engine_ref.h"

#include <stdlib.h>
#include <string.h>

#include "bounds.h"
#include "engine_ctx.h"
#include "forward.h"

tbe_status eng_ref_backward_run(tbe_batch *b, const tbe_layout *l, const gen_bwd *bwd,
                                void **weights, float **momentum, float **psw_grad)
{
  int64_t rows = ref_bwd_rows(b);
  size_t wbytes = tbe_mul_size((size_t)b->table_offset[b->num_tables], tbe_dtype_size(b->wdtype));
  void *w = malloc(wbytes + 1);
  float *m = bwd->momentum ? malloc(tbe_mul_size((size_t)rows + 1, sizeof(float))) : NULL;
  float *psw = b->per_sample_weights ? malloc(tbe_mul_size((size_t)b->N + 1, sizeof(float)))
                                     : NULL;
  tbe_status s = tbe_ok();
  if (!w || (bwd->momentum && !m) || (b->per_sample_weights && !psw))
    s = tbe_error(TBE_ENOMEM, "backward", -1, "cannot allocate the backward's outputs");
  if (s.code == TBE_OK) {
    void *keep = b->weights;
    memcpy(w, keep, wbytes);
    if (m)
      memcpy(m, bwd->momentum, sizeof(float) * (size_t)rows);
    b->weights = w;
    s = ref_backward(b, l, bwd->cfg, bwd->grad_output, m, psw, NULL);
    b->weights = keep;
  }
  if (s.code != TBE_OK) {
    free(w);
    free(m);
    free(psw);
    w = m = psw = NULL;
  }
  *weights = w;
  *momentum = m;
  *psw_grad = psw;
  return s;
}

tbe_status eng_ref_backward_exact(const tbe_batch *b, const tbe_layout *l, const gen_bwd *bwd,
                                  double **w_exact, double **w_bound, double **m_exact,
                                  double **m_bound)
{
  int64_t n = b->table_offset[b->num_tables], rows = ref_bwd_rows(b);
  int m = bwd->momentum != NULL;
  double *we = malloc(tbe_mul_size((size_t)n + 1, sizeof(double)));
  double *wb = malloc(tbe_mul_size((size_t)n + 1, sizeof(double)));
  double *me = m ? malloc(tbe_mul_size((size_t)rows + 1, sizeof(double))) : NULL;
  double *mb = m ? malloc(tbe_mul_size((size_t)rows + 1, sizeof(double))) : NULL;
  tbe_status s = tbe_ok();
  if (!we || !wb || (m && (!me || !mb)))
    s = tbe_error(TBE_ENOMEM, "exact", -1, "cannot allocate the exact twin of %lld weights",
                  (long long)n);
  if (s.code == TBE_OK)
    s = ref_backward_exact(b, l, bwd->cfg, bwd->grad_output, bwd->momentum, we, wb, me, mb);
  if (s.code != TBE_OK) {
    free(we);
    free(wb);
    free(me);
    free(mb);
    we = wb = me = mb = NULL;
  }
  *w_exact = we;
  *w_bound = wb;
  *m_exact = me;
  *m_bound = mb;
  return s;
}

/* ref_backward on the bounds-checked batch b (which stays pristine), pushed as
 * eng_push_backward says. */
static tbe_status eng_push_ref_backward(eng_run *r, tbe_batch *b, const tbe_layout *l,
                                   const gen_bwd *bwd)
{
  void *w;
  float *m, *psw;
  tbe_status s = eng_ref_backward_run(b, l, bwd, &w, &m, &psw);
  if (s.code == TBE_OK)
    s = eng_push_backward(r, b, bwd->cfg, w, m, psw);
  free(w);
  free(m);
  free(psw);
  return s;
}

void eng_run_ref(eng_ctx *x, tbe_batch *b, const tbe_layout *l, const eng_job *j, eng_run *r)
{
  (void)x;
  int64_t warnings = 0;
  size_t bytes = tbe_mul_size((size_t)l->out_elems, tbe_dtype_size(b->out_dtype));
  void *out = malloc(bytes ? bytes : 1);
  if (!out) {
    eng_fail_run(r, ENG_ERROR, tbe_error(TBE_ENOMEM, "output", -1, "cannot allocate %zu bytes",
                                         bytes));
    return;
  }
  memset(out, 0xFF, bytes); /* NaN in every dtype: an element the forward never writes fails */
  double t0 = eng_now_ms();
  tbe_status bounds = ref_bounds_check(b, l, j->mode, &warnings);
  tbe_status s = bounds.code == TBE_OK ? ref_forward(b, l, out) : tbe_ok();
  r->ms = eng_now_ms() - t0;
  if (bounds.code != TBE_OK && bounds.code != TBE_EBOUNDS)
    s = bounds;
  if (s.code == TBE_OK)
    s = eng_push_bounds(r, "bounds", b->itype, b->indices, b->N, b->offsets, l->total_B,
                        warnings, bounds);
  if (s.code == TBE_OK && bounds.code == TBE_OK)
    s = eng_push_output(r, b, l, out, NULL);
  if (s.code == TBE_OK && bounds.code == TBE_OK && j->bwd)
    s = eng_push_ref_backward(r, b, l, j->bwd);
  free(out);
  if (s.code != TBE_OK)
    eng_fail_run(r, ENG_ERROR, s);
}
