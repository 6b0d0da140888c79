/* device_none.c: the GPU entry points of a build without CUDA: each reports TBE_ENODEV, so the
 * harness records the gpu engine as skipped. Not a simulation of the GPU.
 */
#include "tbe_gpu.h"

tbe_status gpu_probe(char *desc, size_t n)
{
  if (n)
    desc[0] = '\0';
  return tbe_error(TBE_ENODEV, "gpu", -1, "tbecheck was built without CUDA");
}
