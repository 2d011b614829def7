/* Threads that record nothing of their own (tests/test_thread_start.py): under the preload their
 * start and end go to the process's thread ledger, not to chunk files.
 *   thread_start N [kill]
 * N threads named "idle" that record nothing, each created and joined; a child process (fork)
 * doing the same with 3; one thread that records an event 20 ms after it started. With "kill",
 * two threads then block without recording and the program SIGKILLs itself. Prints the child's
 * pid and the late thread's tid. */
#define _GNU_SOURCE
#include <oslens.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int blocked_started;

static void *idle(void *arg) {
    pthread_setname_np(pthread_self(), "idle");
    return arg;
}

static void *late(void *arg) {
    *(pid_t *)arg = gettid();
    usleep(20000);
    uint64_t v = 42;
    osl_event(7, &v, sizeof v);
    return NULL;
}

static void *blocked(void *arg) {
    atomic_fetch_add(&blocked_started, 1);
    for (;;)
        pause();
    return arg;
}

static void idle_threads(int n) {
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, idle, NULL) != 0 || pthread_join(t, NULL) != 0)
            exit(1);
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    int kill_at_end = argc > 2 && !strcmp(argv[2], "kill");
    idle_threads(n);
    pid_t child = fork();
    if (child == 0) {
        idle_threads(3);
        exit(0);
    }
    int st;
    if (child < 0 || waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 1;
    pthread_t t;
    pid_t late_tid = 0;
    if (pthread_create(&t, NULL, late, &late_tid) != 0 || pthread_join(t, NULL) != 0)
        return 1;
    printf("child=%d late=%d\n", child, late_tid);
    fflush(stdout);
    if (kill_at_end) {
        for (int i = 0; i < 2; i++)
            if (pthread_create(&t, NULL, blocked, NULL) != 0)
                return 1;
        while (atomic_load(&blocked_started) < 2)
            usleep(100);
        usleep(2000); /* past their THREAD_START, which comes before their function runs */
        raise(SIGKILL);
    }
    return 0;
}
