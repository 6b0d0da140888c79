/* progress.h: the live progress line of `tbecheck run` (done/total, failures, cases per second,
 * ETA), formatted into a buffer. Not the printing (tbecheck.c) nor the summary (summary.sql).
 */
#ifndef HARNESS_PROGRESS_H
#define HARNESS_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int64_t total, done, failed;
  double t0_ms; /* when the first case started */
} progress;

/* Starts counting total cases at time now_ms (any monotonic clock in milliseconds). */
void progress_start(progress *p, int64_t total, double now_ms);

/* One more case done; failed != 0 if it failed. */
void progress_step(progress *p, int failed);

/* Writes "[  37/120] 2 failed, 14.2 cases/s, ETA 0:06" into buf (like snprintf). The rate and
 * ETA are "-" until one case is done; the ETA assumes the rate so far holds. */
int progress_format(const progress *p, double now_ms, char *buf, size_t n);

#endif
