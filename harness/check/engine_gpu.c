/* engine_gpu.c: the gpu engine: one call of gpu_run (or the stand-in a test gives) and its
 * results as named outputs. Not the GPU code itself (gpu/), not the checks (engine.c).
 */
#include <stdio.h>

#include "engine_gpu.h"


/* The GPU forward: its bounds outputs, and its output with the features the GPU itself put on
 * the small-table path (gpu_fwd_result.small_mask; the harness never recomputes that choice). */
void eng_run_gpu(eng_ctx *x, tbe_batch *b, const tbe_layout *l, const eng_job *j, eng_run *r)
{
  gpu_fwd_result g;
  gpu_bwd_result gb;
  const gen_bwd *bwd = j->bwd;
  static const gpu_bwd_config no_bwd; /* forward only: the backward's knobs are not read */
  tbe_status s = x->opt.gpu.run(b, l, j->mode, j->cfg, bwd ? bwd->cfg : NULL,
                                bwd ? bwd->gpu : &no_bwd, bwd ? bwd->grad_output : NULL,
                                bwd ? bwd->momentum : NULL, &g, &gb);
  if (s.code != TBE_OK) {
    eng_fail_run(r, s.code == TBE_ENODEV ? ENG_SKIP : ENG_ERROR, s);
    x->opt.gpu.fwd_free(&g);
    x->opt.gpu.bwd_free(&gb);
    return;
  }
  r->ms = g.ms + gb.stats.ms;
  s = eng_push_bounds(r, j->cfg->fused_bounds ? "bounds.fused" : "bounds", b->itype, g.indices,
                      b->N, g.offsets, l->total_B, g.warnings, g.bounds);
  if (s.code == TBE_OK && g.bounds.code == TBE_OK) {
    s = eng_push_output(r, b, l, g.out, g.small_mask);
    if (s.code == TBE_OK && g.guard_errors)
      snprintf(r->out[r->n_out - 1].fault, sizeof r->out[0].fault,
               "%d bytes written outside the output (guard regions)", g.guard_errors);
  }
  if (s.code == TBE_OK && g.bounds.code == TBE_OK && bwd)
    s = eng_push_backward(r, b, bwd->cfg, gb.weights, gb.momentum, gb.psw_grad);
  if (s.code == TBE_OK && g.bounds.code == TBE_OK && bwd)
    s = eng_mark_small_tc(r, b, gb.small_tc_mask);
  /* on the output, or without one (FATAL) on the last bounds output */
  eng_output *o = s.code == TBE_OK && r->n_out ? (eng_output *)eng_find(r, "output") : NULL;
  if (!o && s.code == TBE_OK && r->n_out)
    o = &r->out[r->n_out - 1];
  if (o && g.rerun_diffs && !o->fault[0])
    snprintf(o->fault, sizeof o->fault,
             "%lld elements differ in a second run over another poison: unwritten, or not "
             "deterministic", (long long)g.rerun_diffs);
  x->opt.gpu.fwd_free(&g);
  x->opt.gpu.bwd_free(&gb);
  if (s.code != TBE_OK)
    eng_fail_run(r, ENG_ERROR, s);
}
