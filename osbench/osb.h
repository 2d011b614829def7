/* osbench: the common harness of the oslens micro-benchmarks (Russo, Madany, Campbell 1990).
 *
 * Every benchmark program is `osb_<group> list` or
 * `osb_<group> run NAME [--reps N] [--warmup N] [--target-ms MS] [--dir D] [--cpu-a C] [--cpu-b C] [--param X]`.
 * `run` prints one JSON object per measured repetition on stdout:
 *   {"rep":i,"ops":n,"ns":elapsed,"value":ns_per_op,"nivcsw":..,"nvcsw":..,"delay_ns":..,"cpu":..,"extra":{..}}
 * or one {"skip":"reason"} line and exit status 3 when the benchmark cannot run here.
 * Statistics, noise detection and presentation are done by the Python runner (oslens.osbench). */
#ifndef OSB_H
#define OSB_H
#define _GNU_SOURCE
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

struct osb_run {
    long iters;          /* in: operations requested for this repetition */
    long ops_done;       /* out: operations actually timed (0: same as iters) */
    uint64_t ns;         /* out: timed nanoseconds */
    char extra[512];     /* out: optional JSON object body (without braces) */
    long nivcsw_extra;   /* out: involuntary switches of helper tasks (partners) */
    const char *dir;     /* scratch directory (fresh, owned by this run) */
    int cpu_a, cpu_b;    /* CPUs chosen by the runner (-1: choose) */
    long param;          /* benchmark-specific parameter (e.g. slice in us) */
    int rep;             /* repetition index (-1 during calibration and warm-up) */
    void *state;
    char skip[256];      /* set by setup() to refuse to run, with the reason */
};

struct osb_bench {
    const char *name;
    const char *desc;
    long fixed_ops;                       /* >0: do not calibrate, always ask for this many ops */
    int (*setup)(struct osb_run *);       /* optional; return non-zero (and set skip) to skip */
    int (*fn)(struct osb_run *);          /* time r->iters operations into r->ns; <0 on failure */
    void (*teardown)(struct osb_run *);   /* optional */
};

int osb_main(int argc, char **argv, const struct osb_bench *table, size_t n);

uint64_t osb_now(void);
int osb_pin(int cpu);                    /* pin the calling thread; 0 on success */
void osb_die_with_parent(void);          /* SIGKILL this process when its parent dies */
void osb_fail(const char *what);         /* print {"error":...} and exit 1 */
void osb_skip(struct osb_run *r, const char *fmt, ...);
int osb_nth_allowed_cpu(int from_end);   /* the allowed CPUs counted from the end; -1 if none */
int osb_allowed_cpus(void);

#define OSB_NOINLINE __attribute__((noinline, noipa))
#define OSB_BARRIER() __asm__ __volatile__("" ::: "memory")

#endif
