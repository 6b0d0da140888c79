/* engine_gpu.h: the gpu engine (an eng_fn, engine_ctx.h). Not the GPU code (gpu/tbe_gpu.h).
 */
#ifndef HARNESS_ENGINE_GPU_H
#define HARNESS_ENGINE_GPU_H

#include "engine_ctx.h"

void eng_run_gpu(eng_ctx *x, tbe_batch *b, const tbe_layout *l, const eng_job *j, eng_run *r);

#endif
