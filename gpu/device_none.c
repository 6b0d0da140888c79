/* device_none.c: the GPU entry points of a build without CUDA: each reports TBE_ENODEV, so the
 * harness records the gpu engine as skipped. Not a simulation of the GPU.
 */
#include "tbe_gpu.h"

#include <string.h>

tbe_status gpu_probe(char *desc, size_t n)
{
  if (n)
    desc[0] = '\0';
  return tbe_error(TBE_ENODEV, "gpu", -1, "tbecheck was built without CUDA");
}

tbe_status gpu_run_forward(const tbe_batch *b, const tbe_layout *l, tbe_bounds_mode mode,
                           const gpu_fwd_config *cfg, gpu_fwd_result *r)
{
  (void)b;
  (void)l;
  (void)mode;
  (void)cfg;
  memset(r, 0, sizeof *r);
  return tbe_error(TBE_ENODEV, "gpu", -1, "tbecheck was built without CUDA");
}

void gpu_fwd_result_free(gpu_fwd_result *r) { memset(r, 0, sizeof *r); }

struct gpu_session {
  int unused;
};

tbe_status gpu_session_open(const tbe_batch *b, const tbe_layout *l, gpu_session **out)
{
  (void)b;
  (void)l;
  *out = NULL;
  return tbe_error(TBE_ENODEV, "gpu", -1, "tbecheck was built without CUDA");
}

tbe_status gpu_session_forward(gpu_session *s, tbe_bounds_mode mode, const gpu_fwd_config *cfg,
                               int bounds_only, float *ms)
{
  (void)s;
  (void)mode;
  (void)cfg;
  (void)bounds_only;
  (void)ms;
  return tbe_error(TBE_ENODEV, "gpu", -1, "tbecheck was built without CUDA");
}

tbe_status gpu_session_results(gpu_session *s, gpu_fwd_result *r)
{
  (void)s;
  memset(r, 0, sizeof *r);
  return tbe_error(TBE_ENODEV, "gpu", -1, "tbecheck was built without CUDA");
}

void gpu_session_close(gpu_session *s) { (void)s; }

tbe_status gpu_copy_ceiling(size_t bytes, int reps, double *gbps)
{
  (void)bytes;
  (void)reps;
  *gbps = 0;
  return tbe_error(TBE_ENODEV, "gpu", -1, "tbecheck was built without CUDA");
}
