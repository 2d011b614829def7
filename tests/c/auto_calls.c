/* auto_calls.c: an ordinary program for the -finstrument-functions tests (no oslens calls).
 * Call tree of one run:
 *   main -> work -> leaf, leaf, leaf
 *        -> recurse(3) -> recurse(2) -> recurse(1)
 *        -> lib_entry -> lib_twice        (shared library libauto_calls_lib.so)
 *        -> tiny x 1000                   (short calls, for the minimum-duration filter)
 *        -> slow                          (about 2 ms)
 *   auto_calls fork: main forks; the child calls work too. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int lib_entry(int x);

volatile long sink;

__attribute__((noinline)) void leaf(int i) { sink += i; }

__attribute__((noinline)) void work(void) {
    for (int i = 0; i < 3; i++)
        leaf(i);
}

__attribute__((noinline)) int recurse(int n) { return n <= 1 ? 1 : n + recurse(n - 1); }

__attribute__((noinline)) void tiny(int i) { sink ^= i; }

__attribute__((noinline)) void slow(void) {
    struct timespec t = {0, 2000000};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    work();
    sink += recurse(3);
    sink += lib_entry(4);
    for (int i = 0; i < 1000; i++)
        tiny(i);
    slow();
    if (argc > 1 && strcmp(argv[1], "fork") == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            work();
            return 0;
        }
        waitpid(pid, NULL, 0);
    }
    printf("%ld\n", (long)sink);
    return 0;
}
