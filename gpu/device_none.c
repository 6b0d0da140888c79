/* device_none.c: the GPU entry points of a build without CUDA: each reports TBE_ENODEV, so the
 * harness records the gpu engine as skipped. Not a simulation of the GPU.
 */
#include "tbe_gpu.h"

#include <string.h>

#define NO_CUDA tbe_error(TBE_ENODEV, "gpu", -1, "tbecheck was built without CUDA")

tbe_status gpu_probe(char *desc, size_t n)
{
  if (n)
    desc[0] = '\0';
  return NO_CUDA;
}

tbe_status gpu_run_forward(const tbe_batch *b, const tbe_layout *l, tbe_bounds_mode mode,
                           const gpu_fwd_config *cfg, gpu_fwd_result *r)
{
  (void)b;
  (void)l;
  (void)mode;
  (void)cfg;
  memset(r, 0, sizeof *r);
  return NO_CUDA;
}

tbe_status gpu_run(const tbe_batch *b, const tbe_layout *l, tbe_bounds_mode mode,
                   const gpu_fwd_config *fcfg, const ref_bwd_config *bcfg,
                   const gpu_bwd_config *gcfg, const void *grad_output, const float *momentum,
                   gpu_fwd_result *fr, gpu_bwd_result *br)
{
  (void)b;
  (void)l;
  (void)mode;
  (void)fcfg;
  (void)bcfg;
  (void)gcfg;
  (void)grad_output;
  (void)momentum;
  memset(fr, 0, sizeof *fr);
  if (br)
    memset(br, 0, sizeof *br);
  return NO_CUDA;
}

void gpu_fwd_result_free(gpu_fwd_result *r) { memset(r, 0, sizeof *r); }
void gpu_bwd_result_free(gpu_bwd_result *r) { memset(r, 0, sizeof *r); }

struct gpu_session {
  int unused;
};

tbe_status gpu_session_open(const tbe_batch *b, const tbe_layout *l, gpu_session **out)
{
  (void)b;
  (void)l;
  *out = NULL;
  return NO_CUDA;
}

tbe_status gpu_session_forward(gpu_session *s, tbe_bounds_mode mode, const gpu_fwd_config *cfg,
                               int bounds_only, float *ms)
{
  (void)s;
  (void)mode;
  (void)cfg;
  (void)bounds_only;
  (void)ms;
  return NO_CUDA;
}

tbe_status gpu_session_results(gpu_session *s, gpu_fwd_result *r)
{
  (void)s;
  memset(r, 0, sizeof *r);
  return NO_CUDA;
}

void gpu_session_close(gpu_session *s) { (void)s; }

/* No session can be opened without CUDA, so these are never reached with one. */
tbe_status gpu_session_backward_open(gpu_session *s, const ref_bwd_config *cfg,
                                     const gpu_bwd_config *g, const void *grad_output,
                                     const float *momentum)
{
  (void)s;
  (void)cfg;
  (void)g;
  (void)grad_output;
  (void)momentum;
  return NO_CUDA;
}

tbe_status gpu_session_backward_config(gpu_session *s, const gpu_bwd_config *g)
{
  (void)s;
  (void)g;
  return NO_CUDA;
}

tbe_status gpu_session_backward(gpu_session *s, gpu_bwd_stats *st)
{
  (void)s;
  (void)st;
  return NO_CUDA;
}

tbe_status gpu_session_backward_results(gpu_session *s, gpu_bwd_result *r)
{
  (void)s;
  memset(r, 0, sizeof *r);
  return NO_CUDA;
}

tbe_status gpu_session_capture(gpu_session *s, tbe_bounds_mode mode, const gpu_fwd_config *cfg)
{
  (void)s;
  (void)mode;
  (void)cfg;
  return NO_CUDA;
}

tbe_status gpu_session_upload(gpu_session *s, const tbe_batch *b, const void *grad_output,
                              const float *momentum)
{
  (void)s;
  (void)b;
  (void)grad_output;
  (void)momentum;
  return NO_CUDA;
}

tbe_status gpu_session_replay(gpu_session *s)
{
  (void)s;
  return NO_CUDA;
}

tbe_status gpu_copy_ceiling(size_t bytes, int reps, double *gbps)
{
  (void)bytes;
  (void)reps;
  *gbps = 0;
  return NO_CUDA;
}
