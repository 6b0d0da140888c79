/* gen.h: the generator: a parsed case into its batch (case_generate) and its backward's inputs,
 * together (gen_case). Not the case language (case.h) nor a case's fields (case_private.h).
 *
 * Invariant: generation is a pure function of the case: the same text gives the same bytes on
 * every machine and for any thread count.
 */
#ifndef HARNESS_GEN_H
#define HARNESS_GEN_H

#include <stdint.h>

#include "backward.h"
#include "case.h"
#include "tbe.h"

/* Builds the batch (malloc'd arrays; free with tbe_batch_free). The result passes
 * tbe_batch_validate. Returns TBE_ENOMEM if it does not fit. */
tbe_status case_generate(const tbe_case *c, tbe_batch *b);

/* Builds the backward's inputs for the batch b (as case_generate made it) with layout l:
 * *grad_output gets l->out_elems values of b->out_dtype (16-bit types as bits), drawn like the
 * weights (every value exact in the dtype, exponents spread so sums round); *momentum gets
 * ref_bwd_rows(b) positive fp32 values, one per row of every table (drawn per row, so a wrong
 * table or row offset reads a different value), when the optimizer is row-wise Adagrad, else
 * NULL. Both malloc'd; a pure function of the case.
 * Returns TBE_ENOMEM if they do not fit (nothing is left allocated then). */
tbe_status case_generate_backward(const tbe_case *c, const tbe_batch *b, const tbe_layout *l,
                                  void **grad_output, float **momentum);

/* The backward's part of a case: its configuration and inputs. */
typedef struct {
  const ref_bwd_config *cfg; /* cfg->opt.kind != REF_OPT_NONE */
  const void *grad_output;   /* [out_elems] in the output dtype */
  const float *momentum;     /* [rows] (rowwise_adagrad), else NULL */
  const gpu_bwd_config *gpu; /* how the GPU engine runs it (the case's knobs) */
} gen_bwd;

/* Generates case c: the batch into *b (validated) and, when the case has an optimizer, its
 * backward's inputs into *bwd (cfg, malloc'd grad_output and momentum); else bwd->cfg is NULL.
 * On failure everything is freed. Release with gen_case_free. */
tbe_status gen_case(const tbe_case *c, tbe_batch *b, gen_bwd *bwd);
void gen_case_free(tbe_batch *b, gen_bwd *bwd);

#endif
