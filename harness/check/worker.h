/* worker.h: a child process spoken to one line at a time (a request on its stdin, one reply line
 * on its stdout), such as the oracle engine's Python worker. Not a shell and not a thread pool.
 *
 * Invariant: between calls a started worker has answered every request it was sent, so the next
 * line read is the reply to the next request. Once it has exited or misbehaved it is dead: every
 * later request fails at once with the reason it died (a new worker takes its place).
 */
#ifndef HARNESS_WORKER_H
#define HARNESS_WORKER_H

#include <stddef.h>

#include "tbe.h"

typedef struct worker worker;

/* Starts argv[0] (searched in PATH when it has no '/') with argv, and reads its first line (its
 * greeting) into greeting. TBE_EIO if it cannot be started or closes its stdout before greeting;
 * the message says why. Every line it is to give (the greeting, each reply) must come within
 * timeout_s seconds (0: no limit), else it is killed and dead. The caller must have SIGPIPE
 * ignored, so a dead worker is an error, not a signal. */
tbe_status worker_start(char *const argv[], int timeout_s, worker **out, char *greeting,
                        size_t n);

/* Sends request (one line, without '\n') and reads one reply line into reply (without '\n').
 * TBE_EIO if the worker has died, dies meanwhile or does not reply in time. */
tbe_status worker_ask(worker *w, const char *request, char *reply, size_t n);

/* The worker's process id (0 for NULL): what a signal handler may kill. */
int worker_pid(const worker *w);

/* Why the worker is dead (how it ended: a signal, an exit status), or NULL while it lives. */
const char *worker_dead(const worker *w);

/* Closes the worker's stdin, waits for it to exit and frees it (NULL is allowed). */
void worker_stop(worker *w);

#endif
