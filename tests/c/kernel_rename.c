/* Renames itself, then computes without a system call for a while: the kernel's switches see
 * the new name only when the thread next leaves a CPU; task_rename sees the rename itself. */
#include <stdio.h>
#include <sys/prctl.h>

int main(void) {
    prctl(PR_SET_NAME, "renamed-spin", 0, 0, 0);
    volatile unsigned long s = 0;
    for (unsigned long i = 0; i < 50000000UL; i++)
        s += i;
    return s == 42;
}
