/* A program that records little: an event every 10 ms, asleep in between, for argv[1] seconds. */
#include <oslens.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    int seconds = argc > 1 ? atoi(argv[1]) : 60;
    osl_event_name(1, "tick");
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (long i = 0; i < seconds * 100L; i++) {
        osl_event(1, &i, sizeof i);
        nanosleep(&tick, NULL);
    }
    return 0;
}
