/* engine_ctx.h: what the engines of check/ share inside the room: the job an engine is given
 * and the context the engines were opened with. Not the public interface (engine.h).
 */
#ifndef HARNESS_ENGINE_CTX_H
#define HARNESS_ENGINE_CTX_H

#include "engine.h"
#include "outputs.h"
#include "worker.h"

typedef struct {
  const char *canon;
  tbe_bounds_mode mode;
  const gpu_fwd_config *cfg;
  const gen_bwd *bwd; /* the backward's configuration and inputs, or NULL: forward only */
} eng_job;

struct eng_ctx {
  eng_options opt;
  char unavailable[ENG_COUNT][256]; /* "" when the engine can run */
  char gpu_desc[256];
  worker *oracle;
  char oracle_tmp[256];             /* temporary directory of the oracle's exports */
  char oracle_case[300];            /* oracle_tmp/case */
};

/* An engine: runs job j on the pristine batch b (laid out by l) into r. The ref and gpu
 * engines leave b's indices and offsets repaired by their bounds check (the caller restores
 * them); none changes b's weights. */
typedef void (*eng_fn)(eng_ctx *x, tbe_batch *b, const tbe_layout *l, const eng_job *j,
                       eng_run *r);

#endif
