/* kernel_order N: N times an application event (id 5) followed at once by getpid: each event
 * must order before its getpid's sys_enter on the merged timeline. */
#include <oslens.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    osl_event_name(5, "before-getpid");
    for (int i = 0; i < n; i++) {
        osl_event(5, NULL, 0);
        syscall(SYS_getpid);
    }
    return 0;
}
