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
  eng_id self;        /* the engine it is given to */
} eng_job;

struct eng_ctx {
  eng_options opt;
  char unavailable[ENG_COUNT][256]; /* "" when the engine can run */
  char gpu_desc[256];
  worker *worker[ENG_COUNT];        /* the worker engines' processes (oracle, external) */
  char argv[ENG_COUNT][4][1024];    /* how each was started (a dead one is started again) */
  char xdir[ENG_COUNT][320];        /* their exchange directories (exchange.h), "" if none */
  int order[ENG_COUNT];             /* an external engine's order model (ref_order) */
  char version[ENG_COUNT][160];     /* and what it says it is */
};

/* An engine: runs job j on the pristine batch b (laid out by l) into r. The ref and gpu
 * engines leave b's indices and offsets repaired by their bounds check (the caller restores
 * them); none changes b's weights. */
typedef void (*eng_fn)(eng_ctx *x, tbe_batch *b, const tbe_layout *l, const eng_job *j,
                       eng_run *r);

#endif
