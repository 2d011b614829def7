/* Children that record nothing but their fork, exec and exit (tests/test_thread_start.py): under
 * the preload those markers go to the child's thread ledger, so each child makes one file.
 *   fork_markers N
 * Forks N children that exec /bin/true, then one whose first exec fails, one that exit()s, one
 * that _exit()s, one that records an event before it execs, and one killed by SIGKILL while it
 * waits. Prints each child's pid as "kind=pid", one a line, in that order. */
#define _GNU_SOURCE
#include <oslens.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char *const true_argv[] = {"true", NULL};
static int ready[2]; /* the killed child says it runs (its fork marker is written by then) */

static void run_child(const char *kind) {
    switch (kind[0]) {
    case 'e': /* exec */
        execv("/bin/true", true_argv);
        break;
    case 'f': /* failed exec, then /bin/true */
        execv("/nonexistent/prog", true_argv);
        execv("/bin/true", true_argv);
        break;
    case 'x': /* exit */
        exit(3);
    case '_': /* _exit */
        _exit(0);
    case 'r': { /* records an event of its own, then execs */
        uint64_t v = 7;
        osl_event(9, &v, sizeof v);
        execv("/bin/true", true_argv);
        break;
    }
    case 'k': /* killed */
        if (write(ready[1], "k", 1) != 1)
            _exit(98);
        for (;;)
            pause();
    }
    _exit(99);
}

static pid_t start(const char *kind, int wait) {
    fflush(stdout); /* a child that exit()s would print the buffer again */
    pid_t pid = fork();
    if (pid < 0)
        exit(1);
    if (pid == 0)
        run_child(kind);
    printf("%s=%d\n", kind, pid);
    int st;
    if (wait && waitpid(pid, &st, 0) != pid)
        exit(1);
    return pid;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    for (int i = 0; i < n; i++)
        start("exec", 1);
    start("failed", 1);
    start("xit", 1);
    start("_exit", 1);
    start("record", 1);
    if (pipe(ready) != 0)
        return 1;
    pid_t killed = start("killed", 0);
    char c;
    if (read(ready[0], &c, 1) != 1)
        return 1;
    kill(killed, SIGKILL);
    waitpid(killed, NULL, 0);
    fflush(stdout);
    return 0;
}
