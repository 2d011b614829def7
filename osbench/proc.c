/* Process creation, for comparison with lmbench's lat_proc: fork+exit and fork+exec. */
#include "osb.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

static char hello[PATH_MAX];

static int b_fork_exit(struct osb_run *r)
{
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++) {
        pid_t p = fork();
        if (p < 0) return -1;
        if (p == 0) _exit(0);
        if (waitpid(p, NULL, 0) != p) return -1;
    }
    r->ns = osb_now() - t0;
    return 0;
}

static int setup_exec(struct osb_run *r)
{
    ssize_t n = readlink("/proc/self/exe", hello, sizeof hello - 16);
    if (n <= 0) { osb_skip(r, "cannot find /proc/self/exe"); return 1; }
    hello[n] = 0;
    char *slash = strrchr(hello, '/');
    strcpy(slash + 1, "osb_hello");
    if (access(hello, X_OK) != 0) { osb_skip(r, "%s is not built", hello); return 1; }
    return 0;
}

static int b_fork_exec(struct osb_run *r)
{
    char *argv[] = { hello, NULL };
    char *envp[] = { NULL };
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++) {
        pid_t p = fork();
        if (p < 0) return -1;
        if (p == 0) { execve(hello, argv, envp); _exit(127); }
        int st;
        if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
    }
    r->ns = osb_now() - t0;
    return 0;
}

static const struct osb_bench table[] = {
    { "proc.fork_exit", "fork a child that exits at once; wait for it", 0, NULL, b_fork_exit, NULL },
    { "proc.fork_exec", "fork a child that execs a tiny static program; wait for it", 0, setup_exec, b_fork_exec, NULL },
};

int main(int argc, char **argv) { return osb_main(argc, argv, table, sizeof table / sizeof table[0]); }
