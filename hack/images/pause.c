/*
 * The pause image's program: the first process of every pod sandbox. It holds the pod's
 * namespaces open, reaps children that are reparented to it, and exits 0 on SIGTERM or SIGINT.
 * Built static (`gcc -static -Os`) by `minik8s image build pause`.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;
static volatile sig_atomic_t child_exited;

static void on_stop(int sig) { stop_signal = sig; }
static void on_child(int sig) {
  (void)sig;
  child_exited = 1;
}

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
    puts("pause 3.9 (minik8s)");
    return 0;
  }
  if (getpid() != 1) {
    fputs("pause: warning: not running as PID 1\n", stderr);
  }

  /* Block the signals we wait for, then wait for them atomically with sigsuspend: a signal
   * that arrives between a check and the wait cannot be lost. */
  sigset_t wanted, waiting;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGTERM);
  sigaddset(&wanted, SIGINT);
  sigaddset(&wanted, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &wanted, &waiting) != 0) {
    perror("pause: sigprocmask");
    return 1;
  }
  sigdelset(&waiting, SIGTERM);
  sigdelset(&waiting, SIGINT);
  sigdelset(&waiting, SIGCHLD);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
    perror("pause: sigaction");
    return 1;
  }
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP;
  if (sigaction(SIGCHLD, &sa, NULL) != 0) {
    perror("pause: sigaction");
    return 1;
  }

  while (!stop_signal) {
    sigsuspend(&waiting);
    if (child_exited) {
      child_exited = 0;
      while (waitpid(-1, NULL, WNOHANG) > 0) {
      }
    }
  }
  fprintf(stderr, "pause: shutting down, got signal %d\n", (int)stop_signal);
  return 0;
}
