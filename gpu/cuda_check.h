/* cuda_check.h: GPU_TRY, the one CUDA error-checking macro: on failure it returns a tbe_status
 * naming the failing statement, file and line. Library code never exits; callers print.
 */
#ifndef GPU_CUDA_CHECK_H
#define GPU_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "tbe.h"

#define GPU_TRY(stmt)                                                                  \
  do {                                                                                 \
    cudaError_t gpu_try_err_ = (stmt);                                                 \
    if (gpu_try_err_ != cudaSuccess)                                                   \
      return tbe_error(TBE_EINTERNAL, "cuda", -1, "%s failed at %s:%d: %s", #stmt,     \
                       __FILE__, __LINE__, cudaGetErrorString(gpu_try_err_));          \
  } while (0)

#endif
