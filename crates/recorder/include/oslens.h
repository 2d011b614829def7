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
