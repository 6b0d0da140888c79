/* runinfo.h: what a run records about where it ran: source commit and whether the tree was
 * dirty, host, CPU, NVIDIA driver, and the memory it may use. Not the GPU probe (gpu/tbe_gpu.h)
 * nor storage (db.h).
 */
#ifndef HARNESS_RUNINFO_H
#define HARNESS_RUNINFO_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  char git_commit[41]; /* "" outside a git checkout or without git */
  int dirty;           /* 1: tracked files differ from HEAD; -1: unknown */
  char host[256];
  char cpu[256];       /* "" if unknown */
  char driver[64];     /* NVIDIA kernel driver version, "" without one */
} runinfo;

/* Fills *r. Never fails: what cannot be found stays empty (or -1). The commit is read from the
 * source tree tbecheck was built from (TBE_SOURCE_DIR) when the run starts. */
void runinfo_collect(runinfo *r);

/* The memory this process may still use, in bytes: MemAvailable of /proc/meminfo, or less where
 * the cgroup's limit (v2 memory.max - memory.current, or v1's limit_in_bytes - usage_in_bytes)
 * leaves less. *source names where the figure came from ("MemAvailable", "cgroup memory.max").
 * Returns -1 when neither can be read. */
int64_t runinfo_memory_available(const char **source);

/* The driver version in the text after "NVRM version:" of /proc/driver/nvidia/version (e.g.
 * "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."): the first word
 * that starts with a digit and holds a dot; "" if none. */
void runinfo_driver_version(const char *nvrm, char *buf, size_t n);

#endif
