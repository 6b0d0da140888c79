/* tbe_gpu.h: the only header the rest of tbecheck includes from gpu/: the CUDA engine's entry
 * points. Not a place for kernels or CUDA types; everything here is plain C.
 */
#ifndef TBE_GPU_H
#define TBE_GPU_H

#include <stddef.h>

#include "tbe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Finds a usable CUDA device. On success writes "name (sm_XY, N MiB)" into desc; returns
 * TBE_ENODEV with the reason in the message when there is none (no driver, no device, or a
 * build without CUDA). */
tbe_status gpu_probe(char *desc, size_t n);

#ifdef __cplusplus
}
#endif

#endif
