#include "osb.h"
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/resource.h>

uint64_t osb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int osb_pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

void osb_die_with_parent(void)
{
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

void osb_fail(const char *what)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s: %s", what, strerror(errno));
    printf("{\"error\":");
    json_string(stdout, msg);
    printf("}\n");
    fflush(stdout);
    exit(1);
}

void osb_skip(struct osb_run *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->skip, sizeof r->skip, fmt, ap);
    va_end(ap);
}

int osb_allowed_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 1;
    return CPU_COUNT(&set);
}

int osb_nth_allowed_cpu(int from_end)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    for (int c = CPU_SETSIZE - 1; c >= 0; c--)
        if (CPU_ISSET(c, &set) && from_end-- == 0)
            return c;
    return -1;
}

/* Run-queue wait of the calling thread (second field of schedstat), in ns. */
static uint64_t delay_ns(void)
{
    unsigned long long run = 0, wait = 0;
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (!f)
        return 0;
    if (fscanf(f, "%llu %llu", &run, &wait) != 2)
        wait = 0;
    fclose(f);
    return wait;
}

static void usage(const char *prog, const struct osb_bench *t, size_t n)
{
    fprintf(stderr, "usage: %s list | run NAME [--reps N] [--warmup N] [--target-ms MS] [--dir D]"
                    " [--cpu-a C] [--cpu-b C] [--param X]\nbenchmarks:", prog);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %s", t[i].name);
    fputc('\n', stderr);
}

static int run_once(const struct osb_bench *b, struct osb_run *r, long iters)
{
    r->iters = iters;
    r->ops_done = 0;
    r->ns = 0;
    r->extra[0] = 0;
    r->nivcsw_extra = 0;
    if (b->fn(r) < 0)
        return -1;
    if (r->ops_done <= 0)
        r->ops_done = iters;
    return 0;
}

int osb_main(int argc, char **argv, const struct osb_bench *table, size_t n)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    osb_die_with_parent();  /* never outlive the runner, even if it is SIGKILLed */
    if (argc >= 2 && strcmp(argv[1], "list") == 0) {
        for (size_t i = 0; i < n; i++)
            printf("%s\t%s\n", table[i].name, table[i].desc);
        return 0;
    }
    if (argc < 3 || strcmp(argv[1], "run") != 0) {
        usage(argv[0], table, n);
        return 2;
    }
    const struct osb_bench *b = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(table[i].name, argv[2]) == 0)
            b = &table[i];
    if (!b) {
        fprintf(stderr, "%s: unknown benchmark %s\n", argv[0], argv[2]);
        usage(argv[0], table, n);
        return 2;
    }
    long reps = 5, warmup = 1;
    double target_ms = 10;
    struct osb_run r;
    memset(&r, 0, sizeof r);
    r.cpu_a = r.cpu_b = -1;
    r.dir = "/tmp";
    for (int i = 3; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--reps")) reps = atol(v);
        else if (!strcmp(k, "--warmup")) warmup = atol(v);
        else if (!strcmp(k, "--target-ms")) target_ms = atof(v);
        else if (!strcmp(k, "--dir")) r.dir = v;
        else if (!strcmp(k, "--cpu-a")) r.cpu_a = atoi(v);
        else if (!strcmp(k, "--cpu-b")) r.cpu_b = atoi(v);
        else if (!strcmp(k, "--param")) r.param = atol(v);
        else { usage(argv[0], table, n); return 2; }
    }
    if (r.cpu_a < 0) r.cpu_a = osb_nth_allowed_cpu(0);
    if (r.cpu_b < 0) r.cpu_b = osb_nth_allowed_cpu(1);
    r.rep = -1;
    if (b->setup && b->setup(&r) != 0) {
        printf("{\"skip\":");
        json_string(stdout, r.skip[0] ? r.skip : "setup refused");
        printf("}\n");
        if (b->teardown) b->teardown(&r);
        return 3;
    }
    uint64_t target = (uint64_t)(target_ms * 1e6);
    long iters = b->fixed_ops > 0 ? b->fixed_ops : 1;
    if (b->fixed_ops <= 0) {
        /* calibrate: grow the operation count until one repetition lasts about target_ms */
        for (;;) {
            if (run_once(b, &r, iters) < 0)
                osb_fail(b->name);
            if (r.ns >= target / 4 || iters >= (1L << 40)) {
                double scale = r.ns ? (double)target / (double)r.ns : 8.0;
                long next = (long)((double)r.ops_done * scale);
                iters = next < 1 ? 1 : next;
                break;
            }
            iters *= (r.ns < target / 64) ? 8 : 2;
        }
    }
    for (long w = 0; w < warmup; w++)
        if (run_once(b, &r, iters) < 0)
            osb_fail(b->name);
    for (long i = 0; i < reps; i++) {
        struct rusage u0, u1;
        r.rep = (int)i;
        uint64_t d0 = delay_ns();
        getrusage(RUSAGE_THREAD, &u0);
        if (run_once(b, &r, iters) < 0)
            osb_fail(b->name);
        getrusage(RUSAGE_THREAD, &u1);
        uint64_t d1 = delay_ns();
        printf("{\"rep\":%ld,\"ops\":%ld,\"ns\":%llu,\"value\":%.6f,\"nivcsw\":%ld,\"nvcsw\":%ld,"
               "\"delay_ns\":%llu,\"cpu\":%d,\"extra\":{%s}}\n",
               i, r.ops_done, (unsigned long long)r.ns, (double)r.ns / (double)r.ops_done,
               (u1.ru_nivcsw - u0.ru_nivcsw) + r.nivcsw_extra, u1.ru_nvcsw - u0.ru_nvcsw,
               (unsigned long long)(d1 - d0), sched_getcpu(), r.extra);
    }
    if (b->teardown)
        b->teardown(&r);
    return 0;
}
