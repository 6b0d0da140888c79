/* exchange.h: the temporary directory where tbecheck hands a case to its worker engines (the
 * oracle, external engines) as .npy files and reads their outputs back. Not the file formats
 * (io/batch_files.h) nor the workers (worker.h).
 *
 * One per process, TMPDIR/tbecheck-engines-PID-XXXXXX, with a subdirectory per engine. SIGTERM,
 * SIGINT and SIGHUP kill the workers (which may be writing there) and remove it, then do what
 * they did; a later tbecheck sweeps the directories of this user's dead processes (SIGKILL
 * leaves no chance to clean up), never a live one's.
 */
#ifndef HARNESS_EXCHANGE_H
#define HARNESS_EXCHANGE_H

#include <stddef.h>

#include "tbe.h"

/* Makes the subdirectory `name` (an engine's name) of this process's exchange directory (made,
 * after a sweep, on first use) into dir, and arms the signals to kill worker_pid and remove it.
 * TBE_EIO with the reason when it cannot. */
tbe_status xchg_open(const char *name, int worker_pid, char *dir, size_t n);

/* Removes the files in dir, not the directory (async-signal-safe). */
void xchg_clear(const char *dir);

/* Disarms dir's worker (call before the worker is stopped: its pid may be reused) and removes
 * dir; the exchange directory goes with its last subdirectory. */
void xchg_close(const char *dir);

#endif
