/* device.cu: finds and describes the CUDA device, and holds the one CUDA error-checking macro's
 * users so far. Not a kernel file; kernels live one path per file beside it.
 */
#include "cuda_check.h"
#include "gpu_internal.h"
#include "tbe_gpu.h"

#include <cstdio>

int gpu_sm_count()
{
  static int sms = 0;
  if (!sms) {
    int dev = 0, n = 132;
    if (cudaGetDevice(&dev) == cudaSuccess)
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    sms = n;
  }
  return sms;
}

int64_t gpu_l2_bytes()
{
  static int64_t bytes = 0;
  if (!bytes) {
    int dev = 0, n = 50 << 20;
    if (cudaGetDevice(&dev) == cudaSuccess)
      cudaDeviceGetAttribute(&n, cudaDevAttrL2CacheSize, dev);
    bytes = n;
  }
  return bytes;
}

extern "C" tbe_status gpu_probe(char *desc, size_t n)
{
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  /* without a loaded driver CUDA says the driver's version is insufficient: say what is so */
  FILE *driver = fopen("/proc/driver/nvidia/version", "r");
  if (driver)
    fclose(driver);
  if (e != cudaSuccess && !driver)
    return tbe_error(TBE_ENODEV, "gpu", -1,
                     "no NVIDIA driver or GPU found (no /proc/driver/nvidia/version)");
  if (e != cudaSuccess || count == 0)
    return tbe_error(TBE_ENODEV, "gpu", -1, "no CUDA device: %s",
                     e != cudaSuccess ? cudaGetErrorString(e) : "none found");
  cudaDeviceProp p;
  GPU_TRY(cudaGetDeviceProperties(&p, 0));
  snprintf(desc, n, "%s (sm_%d%d, %zu MiB)", p.name, p.major, p.minor,
           (size_t)(p.totalGlobalMem >> 20));
  return tbe_ok();
}
