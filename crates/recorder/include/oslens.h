/* oslens.h: the public C API of the oslens recorder (C and C++).
 *
 * Build with the flags from `oslens flags --cflags --libs` (or `pkg-config oslens`).
 * Every call is a cheap no-op when the program does not run under `oslens record`
 * (OSLENS_TRACE unset), so instrumented programs can ship with the calls in place.
 *
 * Instruments (Kohr et al. 1994, section 3.2):
 *   Counter  counts occurrences; its value is recorded when asked, periodically and at exit.
 *   Timer    records the elapsed time of a code fragment (start/stop).
 *   Event    a timestamp, an event id and an optional payload.
 *   Region   begin/end of a named code region (nests per thread).
 * Every record also carries the thread id and the CPU it ran on; thread names are kept.
 * Instruments belong to managers, which suspend, resume and reset them; NULL names the
 * process-wide manager, which controls them all.
 */
#ifndef OSLENS_H
#define OSLENS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct osl_manager osl_manager_t;
typedef struct osl_counter osl_counter_t;
typedef struct osl_timer osl_timer_t;

/* Managers. NULL = the process-wide manager. */
osl_manager_t *osl_manager(const char *name);
void osl_suspend(osl_manager_t *m);
void osl_resume(osl_manager_t *m);
void osl_reset(osl_manager_t *m); /* counters to zero, timers' totals to zero */

/* Counters. */
osl_counter_t *osl_counter(const char *name, osl_manager_t *m);
void osl_count(osl_counter_t *c, int64_t delta);
void osl_counter_record(osl_counter_t *c); /* record the current value now */
int64_t osl_counter_value(const osl_counter_t *c);

/* Timers. */
osl_timer_t *osl_timer(const char *name, osl_manager_t *m);
void osl_timer_start(osl_timer_t *t);
void osl_timer_stop(osl_timer_t *t);
uint64_t osl_timer_total_ns(const osl_timer_t *t); /* sum of completed start/stop intervals */

/* Events: an id (name it once with osl_event_name) and an optional payload of any length. */
void osl_event(uint32_t id, const void *payload, size_t len);
void osl_event_name(uint32_t id, const char *name);

/* Regions, nested per thread. The name is the region's identity. */
void osl_region_begin(const char *name);
void osl_region_end(const char *name);

/* Recording control. */
void osl_enable(void);
void osl_disable(void);
int osl_enabled(void);          /* 1 when events are being recorded */
void osl_flush(void);           /* record counters, write clock pairs, sync buffers to disk */
void osl_thread_name(const char *name); /* name the calling thread in the trace */
uint64_t osl_dropped(void);     /* events this thread dropped because its buffer was full */
uint64_t osl_pause_ns(void);    /* ns this thread spent in the recorder's own pauses (recorded as pause events) */
const char *osl_trace_dir(void); /* the trace directory, or NULL when not recording */

/* The kernel adaptation call: switch the calling thread to the OS policy that the plan
 * loaded by `oslens tune` names for this phase. Returns 0, or an errno value. */
int osl_adapt(const char *phase);

/* Low-level entries used by oslens's own preload and instrumentation libraries. */
void osl_record_raw(uint8_t kind, uint32_t id, uint64_t a, uint64_t b);
uint32_t osl_define_name(uint64_t cls, const char *name); /* the id of a name of class `cls` */
void osl_func_named(uint32_t id, uint32_t exit);          /* entry (0) / exit (1) of a named function */

#ifdef __cplusplus
}
#endif


/* ---- Inline fast path (GCC/Clang on x86_64; define OSLENS_NO_INLINE to call the library) ----
 *
 * osl_event with a payload of a constant size up to 8 bytes, osl_timer_start/stop, and
 * osl_region_begin/end with a string literal write their record straight into the thread's
 * buffer, as the library would: same 32-byte record, same check byte, same commit. Whenever
 * the thread's cursor says no (recording off, no buffer yet, a page or trigger boundary, a
 * clock other than the TSC, a forked child), they call the library, which decides. The
 * layouts below are private to oslens and change with it: rebuild against the installed
 * header. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(OSLENS_NO_INLINE)
#define OSLENS_INLINE 1

#ifdef __cplusplus
extern "C" {
#endif
struct osl__writer {                     /* crates/recorder/src/buffer.rs: Cursor */
    uint64_t *records;                   /* 4 words per record */
    uint64_t pos;
    uint64_t inline_limit;               /* inline writes while pos < inline_limit */
    uint64_t *committed;                 /* the chunk header's committed count */
    const volatile uint32_t *cpu_id;     /* the thread's rseq cpu_id */
    uint32_t names_epoch;                /* per process; cached region ids carry it */
};
struct osl__timer_layout {               /* crates/recorder/src/instruments.rs: Timer */
    uint64_t started, total_ticks;
    uint32_t id;
    uint8_t suspended;                   /* its manager's suspension */
};
extern uint32_t osl__inactive;           /* recording runs only while 0 */
struct osl__writer *osl__writer_attach(void);
uint32_t osl__region_slow(uint8_t kind, const char *name);
#ifdef __cplusplus
}
#endif

/* Per translation unit and thread: the thread's cursor, fetched once (never freed). */
static __thread struct osl__writer *osl__tls_writer __attribute__((unused));

enum { OSL__EVENT = 3, OSL__REGION_BEGIN = 4, OSL__REGION_END = 5, OSL__TIMER_START = 7, OSL__TIMER_STOP = 8 };
/* Bits of osl__inactive the library must see a call for even though nothing is recorded: it
 * initialises itself (1), or counts what the trigger suppressed (16). Other reasons (not
 * tracing, disabled, suspended) make a call a load and a branch. */
#define OSL__ASK_LIBRARY (1u | 16u)

/* The thread's cursor when a record may be written inline, else NULL; then *ask says whether
 * the library must see the call (else it is dropped: recording is off for a reason the
 * library need not hear about). */
static inline __attribute__((always_inline)) struct osl__writer *osl__cursor(int *ask) {
    uint32_t off = __atomic_load_n(&osl__inactive, __ATOMIC_RELAXED);
    if (__builtin_expect(off != 0, 0)) {
        *ask = (off & OSL__ASK_LIBRARY) != 0;
        return 0;
    }
    *ask = 1;
    struct osl__writer *w = osl__tls_writer;
    if (__builtin_expect(w == 0, 0))
        w = osl__tls_writer = osl__writer_attach();
    if (__builtin_expect(w->pos >= w->inline_limit, 0))
        return 0;
    return w;
}

/* One record, laid out and checked as crates/format/src/record.rs says, then committed. */
static inline __attribute__((always_inline)) void osl__write(struct osl__writer *w, uint64_t ts, uint8_t kind,
                                                              uint32_t id, uint64_t a, uint64_t b) {
    uint64_t pos = w->pos;
    uint64_t *r = w->records + pos * 4;
    uint64_t word = (uint64_t)id | (uint64_t)(uint16_t)*w->cpu_id << 32 | (uint64_t)kind << 48;
    uint64_t x = ts ^ a ^ b ^ word;
    /* the check byte is the XOR of the other 31 bytes, xor 0xA5: folded into the top byte */
    x ^= x << 32;
    x ^= x << 16;
    x ^= x << 8;
    r[0] = ts;
    r[1] = word | ((x ^ 0xA500000000000000ull) & 0xFF00000000000000ull);
    r[2] = a;
    r[3] = b;
    w->pos = pos + 1;
    __atomic_store_n(w->committed, pos + 1, __ATOMIC_RELEASE);
}

static inline __attribute__((always_inline)) void osl__event_inline(uint32_t id, const void *payload, size_t len) {
    int ask;
    struct osl__writer *w = osl__cursor(&ask);
    if (w && __builtin_constant_p(len) && len <= 8) {
        uint64_t value = 0;
        if (payload && len)
            __builtin_memcpy(&value, payload, len);
        osl__write(w, __builtin_ia32_rdtsc(), OSL__EVENT, id, len, value);
        return;
    }
    if (ask)
        (osl_event)(id, payload, len);
}

static inline __attribute__((always_inline)) void osl__timer_start_inline(osl_timer_t *t) {
    struct osl__timer_layout *p = (struct osl__timer_layout *)t;
    int ask;
    struct osl__writer *w = osl__cursor(&ask);
    if (w && p && !__atomic_load_n(&p->suspended, __ATOMIC_RELAXED)) {
        uint64_t now = __builtin_ia32_rdtsc();
        __atomic_store_n(&p->started, now, __ATOMIC_RELAXED);
        osl__write(w, now, OSL__TIMER_START, p->id, 0, 0);
        return;
    }
    if (ask)
        (osl_timer_start)(t);
}

static inline __attribute__((always_inline)) void osl__timer_stop_inline(osl_timer_t *t) {
    struct osl__timer_layout *p = (struct osl__timer_layout *)t;
    int ask;
    struct osl__writer *w = osl__cursor(&ask);
    if (w && p && !__atomic_load_n(&p->suspended, __ATOMIC_RELAXED)) {
        uint64_t now = __builtin_ia32_rdtsc();
        uint64_t started = __atomic_load_n(&p->started, __ATOMIC_RELAXED);
        uint64_t elapsed = now > started ? now - started : 0;
        /* one thread times a timer at a time (it has one start), as in the library */
        __atomic_store_n(&p->total_ticks, __atomic_load_n(&p->total_ticks, __ATOMIC_RELAXED) + elapsed, __ATOMIC_RELAXED);
        osl__write(w, now, OSL__TIMER_STOP, p->id, elapsed, 0);
        return;
    }
    if (ask)
        (osl_timer_stop)(t);
}

static inline __attribute__((always_inline)) void osl__region_library(uint8_t kind, const char *name) {
    if (kind == OSL__REGION_BEGIN)
        (osl_region_begin)(name);
    else
        (osl_region_end)(name);
}

/* `site` caches (epoch << 32 | id) for a string-literal call site; NULL for any other name. */
static inline __attribute__((always_inline)) void osl__region_inline(uint8_t kind, const char *name, uint64_t *site) {
    int ask;
    struct osl__writer *w = osl__cursor(&ask);
    if (!ask)
        return;
    if (!site) {
        osl__region_library(kind, name);
        return;
    }
    uint64_t cached = __atomic_load_n(site, __ATOMIC_RELAXED);
    if (w && (uint32_t)(cached >> 32) == w->names_epoch) {
        osl__write(w, __builtin_ia32_rdtsc(), kind, (uint32_t)cached, 0, 0);
        return;
    }
    uint32_t id = osl__region_slow(kind, name);
    /* the library has now named it in this process, and set the cursor's epoch */
    if (id && osl__tls_writer && osl__tls_writer->names_epoch)
        __atomic_store_n(site, (uint64_t)osl__tls_writer->names_epoch << 32 | id, __ATOMIC_RELAXED);
}

#define OSL__REGION_AT_SITE(kind, name)                                                        \
    __extension__({                                                                            \
        static uint64_t osl__site;                                                             \
        osl__region_inline((kind), (name), __builtin_constant_p(name) ? &osl__site : (uint64_t *)0); \
    })
#define osl_region_begin(name) OSL__REGION_AT_SITE(OSL__REGION_BEGIN, name)
#define osl_region_end(name) OSL__REGION_AT_SITE(OSL__REGION_END, name)
#define osl_event(id, payload, len) osl__event_inline((id), (payload), (len))
#define osl_timer_start(t) osl__timer_start_inline(t)
#define osl_timer_stop(t) osl__timer_stop_inline(t)
#endif /* inline fast path */

#ifdef __cplusplus
/* RAII region for C++: { osl::region r("solve"); ... } */
namespace osl {
struct region {
    const char *name_;
    explicit region(const char *name) : name_(name) { osl_region_begin(name); }
    ~region() { osl_region_end(name_); }
    region(const region &) = delete;
    region &operator=(const region &) = delete;
};
} /* namespace osl */
#endif

#endif /* OSLENS_H */
