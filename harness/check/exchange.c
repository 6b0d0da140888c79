/* exchange.c: the worker engines' temporary directory (exchange.h): made per process, removed
 * on the signals that end a run, swept once its owner is dead. Not the engines that use it.
 */
#include "exchange.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define XCHG_SLOTS 8 /* worker engines of one process: the oracle and the external ones */

/* What a signal must remove: the root, and each armed slot's worker and directory. */
static char xchg_root[256];
static struct {
  char dir[320];
  volatile sig_atomic_t pid, armed;
} xchg_slot[XCHG_SLOTS];
static volatile sig_atomic_t xchg_root_made;

void xchg_clear(const char *dir)
{
  static char buf[4096];
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return;
  long n;
  while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
    for (long at = 0; at < n;) {
      const struct {
        unsigned long long ino;
        long long off;
        unsigned short reclen;
        unsigned char type;
        char name[];
      } *e = (const void *)(buf + at);
      if (e->name[0] != '.')
        unlinkat(fd, e->name, 0);
      at += e->reclen;
    }
  close(fd);
}

/* SIGTERM, SIGINT, SIGHUP: the workers go first (they may be writing their outputs), then the
 * directories; then the signal does what it did. */
static void xchg_on_signal(int sig)
{
  for (int i = 0; i < XCHG_SLOTS; i++) {
    if (!xchg_slot[i].armed)
      continue;
    if (xchg_slot[i].pid > 0 && kill((pid_t)xchg_slot[i].pid, SIGKILL) == 0)
      waitpid((pid_t)xchg_slot[i].pid, NULL, 0);
    xchg_clear(xchg_slot[i].dir);
    rmdir(xchg_slot[i].dir);
  }
  if (xchg_root_made)
    rmdir(xchg_root);
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Catches the signals that end a run, where nobody else has claimed them. */
static void xchg_arm_signals(void)
{
  static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction old;
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = xchg_on_signal;
      sigemptyset(&sa.sa_mask);
      sigaction(sigs[i], &sa, NULL);
    }
  }
}

/* Removes the exchange directories under tmp that this user's dead processes left:
 * tbecheck-engines-PID-*, PID not running, with their subdirectories' files. */
static void xchg_sweep(const char *tmp)
{
  DIR *d = opendir(tmp);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    int pid = 0, used = 0;
    if (sscanf(e->d_name, "tbecheck-engines-%d-%n", &pid, &used) != 1 || used == 0 || pid <= 0 ||
        pid == (int)getpid() || kill(pid, 0) == 0 || errno != ESRCH)
      continue;
    char dir[600];
    struct stat st;
    snprintf(dir, sizeof dir, "%s/%s", tmp, e->d_name);
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
      continue;
    DIR *sub = opendir(dir);
    struct dirent *f;
    while (sub && (f = readdir(sub))) {
      char p[900];
      if (f->d_name[0] == '.' || snprintf(p, sizeof p, "%s/%s", dir, f->d_name) >= (int)sizeof p)
        continue;
      xchg_clear(p);
      rmdir(p);
    }
    if (sub)
      closedir(sub);
    rmdir(dir);
  }
  closedir(d);
}

tbe_status xchg_open(const char *name, int worker_pid, char *dir, size_t n)
{
  if (!xchg_root_made) {
    const char *tmp = getenv("TMPDIR");
    tmp = tmp && *tmp ? tmp : "/tmp";
    xchg_sweep(tmp);
    snprintf(xchg_root, sizeof xchg_root, "%s/tbecheck-engines-%d-XXXXXX", tmp, (int)getpid());
    if (!mkdtemp(xchg_root))
      return tbe_error(TBE_EIO, "engines", -1, "cannot create a temporary directory %.100s: %s",
                       xchg_root, strerror(errno));
    xchg_root_made = 1;
    xchg_arm_signals();
  }
  int slot = 0;
  while (slot < XCHG_SLOTS && xchg_slot[slot].armed)
    slot++;
  if (slot == XCHG_SLOTS)
    return tbe_error(TBE_EIO, "engines", -1, "more than %d worker engines", XCHG_SLOTS);
  if (snprintf(dir, n, "%s/%s", xchg_root, name) >= (int)n ||
      (mkdir(dir, 0700) != 0 && errno != EEXIST))
    return tbe_error(TBE_EIO, "engines", -1, "cannot create %.200s: %s", dir, strerror(errno));
  snprintf(xchg_slot[slot].dir, sizeof xchg_slot[slot].dir, "%s", dir);
  xchg_slot[slot].pid = worker_pid;
  xchg_slot[slot].armed = 1;
  return tbe_ok();
}

void xchg_close(const char *dir)
{
  int left = 0;
  for (int i = 0; i < XCHG_SLOTS; i++) {
    if (xchg_slot[i].armed && !strcmp(xchg_slot[i].dir, dir))
      xchg_slot[i].armed = 0;
    left += xchg_slot[i].armed != 0;
  }
  xchg_clear(dir);
  rmdir(dir);
  if (!left && xchg_root_made) {
    rmdir(xchg_root);
    xchg_root_made = 0;
  }
}
