/* engine_ref.h: the ref engine (an eng_fn, engine_ctx.h), and the reference backward's runners
 * on a checked batch that export (store/), the race fuzzer and the benches share.
 */
#ifndef HARNESS_ENGINE_REF_H
#define HARNESS_ENGINE_REF_H

#include "engine_ctx.h"
#include "gen.h"
#include "tbe.h"

/* The reference's backward for bwd on the bounds-checked batch b, on copies of its weights and
 * momentum (b is left as it was): on success *weights (in b's weight dtype), *momentum
 * (with bwd->momentum, else NULL) and *psw_grad (weighted, else NULL) are malloc'd results; on
 * failure (ref_backward's, or TBE_ENOMEM) all are NULL. */
tbe_status eng_ref_backward_run(tbe_batch *b, const tbe_layout *l, const gen_bwd *bwd,
                                void **weights, float **momentum, float **psw_grad);

/* ref_backward_exact for bwd on the bounds-checked batch b: malloc'd exact values and bounds
 * of the weights and, with bwd->momentum, of the momentum (else NULL). All NULL on failure. */
tbe_status eng_ref_backward_exact(const tbe_batch *b, const tbe_layout *l, const gen_bwd *bwd,
                                  double **w_exact, double **w_bound, double **m_exact,
                                  double **m_bound);

void eng_run_ref(eng_ctx *x, tbe_batch *b, const tbe_layout *l, const eng_job *j, eng_run *r);

#endif
