/* Group 1 (paper Table 1): the cost of a call, from a plain function call to a real system call.
 * Each figure is the cost of one loop iteration including the loop itself; calls.loop is that
 * loop alone, so the call costs are figures minus calls.loop (docs/bench.md). */
#include "osb.h"
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static volatile long sink;

OSB_NOINLINE int plain_function(int x) { OSB_BARRIER(); return x + 1; }
OSB_NOINLINE int via_pointer(int x) { OSB_BARRIER(); return x + 2; }

struct object;
struct vtable { int (*method)(struct object *, int); };
struct object { const struct vtable *vt; int field; };
OSB_NOINLINE static int object_method(struct object *self, int x) { OSB_BARRIER(); return x + self->field; }
static const struct vtable object_vtable = { object_method };
static struct object the_object = { &object_vtable, 3 };
static struct object *volatile object_ptr = &the_object;
static int (*volatile function_ptr)(int) = via_pointer;

static int b_loop(struct osb_run *r)
{
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        OSB_BARRIER();
    r->ns = osb_now() - t0;
    return 0;
}

static int b_function(struct osb_run *r)
{
    int acc = 0;
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        acc = plain_function(acc);
    r->ns = osb_now() - t0;
    sink = acc;
    return 0;
}

static int b_indirect(struct osb_run *r)
{
    int acc = 0;
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        acc = function_ptr(acc);
    r->ns = osb_now() - t0;
    sink = acc;
    return 0;
}

static int b_virtual(struct osb_run *r)
{
    int acc = 0;
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++) {
        struct object *o = object_ptr;
        acc = o->vt->method(o, acc);
    }
    r->ns = osb_now() - t0;
    sink = acc;
    return 0;
}

static int b_vdso(struct osb_run *r)
{
    struct timespec ts;
    long acc = 0;
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        acc += ts.tv_nsec;
    }
    r->ns = osb_now() - t0;
    sink = acc;
    return 0;
}

static int b_getpid(struct osb_run *r)
{
    long acc = 0;
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        acc += syscall(SYS_getpid);
    r->ns = osb_now() - t0;
    sink = acc;
    return 0;
}

static int b_getppid(struct osb_run *r)
{
    long acc = 0;
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        acc += getppid();
    r->ns = osb_now() - t0;
    sink = acc;
    return 0;
}

static int fd_rw = -1;
static int setup_read(struct osb_run *r)
{
    fd_rw = open("/dev/zero", O_RDONLY);
    if (fd_rw < 0) { osb_skip(r, "cannot open /dev/zero"); return 1; }
    return 0;
}
static int setup_write(struct osb_run *r)
{
    fd_rw = open("/dev/null", O_WRONLY);
    if (fd_rw < 0) { osb_skip(r, "cannot open /dev/null"); return 1; }
    return 0;
}
static void teardown_rw(struct osb_run *r) { (void)r; if (fd_rw >= 0) close(fd_rw); }

static int b_read(struct osb_run *r)
{
    char c;
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        if (read(fd_rw, &c, 1) != 1) return -1;
    r->ns = osb_now() - t0;
    return 0;
}

static int b_write(struct osb_run *r)
{
    char c = 0;
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        if (write(fd_rw, &c, 1) != 1) return -1;
    r->ns = osb_now() - t0;
    return 0;
}

static const struct osb_bench table[] = {
    { "calls.loop", "the empty counting loop every call figure includes", 0, NULL, b_loop, NULL },
    { "calls.function", "C function call (not inlined), no arguments of note, returns an int", 0, NULL, b_function, NULL },
    { "calls.indirect", "call through a function pointer", 0, NULL, b_indirect, NULL },
    { "calls.virtual", "C++-style virtual call: object -> vtable -> method", 0, NULL, b_virtual, NULL },
    { "calls.vdso_clock_gettime", "clock_gettime(CLOCK_MONOTONIC) through the vDSO", 0, NULL, b_vdso, NULL },
    { "calls.syscall_getpid", "real system call: syscall(SYS_getpid)", 0, NULL, b_getpid, NULL },
    { "calls.syscall_getppid", "getppid(), lmbench's 'null syscall'", 0, NULL, b_getppid, NULL },
    { "calls.read_1byte", "read 1 byte from /dev/zero (lmbench 'read')", 0, setup_read, b_read, teardown_rw },
    { "calls.write_1byte", "write 1 byte to /dev/null (lmbench 'write')", 0, setup_write, b_write, teardown_rw },
};

int main(int argc, char **argv) { return osb_main(argc, argv, table, sizeof table / sizeof table[0]); }
