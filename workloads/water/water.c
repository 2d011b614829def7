/* water: a parallel N-body molecular dynamics code in the spirit of SPLASH WATER
 * (Singh, Weber, Gupta 1992), the workload of Kohr et al. 1994, section 6.
 *
 * Rigid structure of the original, simplified physics:
 *   - every molecule has three sites (O, H, H) held by harmonic springs (INTRAF);
 *   - molecules interact through Lennard-Jones on O-O, a soft repulsion and damped Coulomb
 *     terms between all nine site pairs, with a molecule-based cutoff of half the periodic box
 *     (INTERF, POTENG); CSHIFT computes the minimum-image distances of one molecule to the
 *     half of the others it pairs with; the conditional "inside the cutoff" decides the work;
 *   - a Gear predictor-corrector integrates the motion (PREDIC, CORREC), BNDRY folds the
 *     molecules back into the box, KINETI and POTENG sum energies into lock-protected globals;
 *   - molecules are statically partitioned among the threads; forces on the other molecules
 *     are accumulated locally and added to the shared arrays under per-block locks
 *     (UPDATE_FORCES); barriers separate the steps of a time step.
 * A serial initialisation (CNSTNT, SYSCNS, INITIA) reads the molecule positions from an input
 * file, generated once, then the parent creates the children (FORK) and takes part in the
 * computation itself (WorkStart -> MDMAIN); each child runs MDMAIN.
 *
 * Region names follow Table 2 of the paper; every thread is named in the trace.
 *
 *   water [--threads N] [--steps S] [--molecules M] [--input FILE] [--warm-input]
 *         [--output FILE] [--seed N] [--quiet]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "oslens.h"

#define NSITE 3  /* O, H1, H2 */
#define NDIM 3
#define ORDER 4  /* Gear predictor-corrector values: x, h v, h^2 a / 2, h^3 j / 6 */
#define LOCK_BLOCK 16 /* molecules per force lock */
#define MAX_THREADS 256

typedef double site_vec[NSITE][NDIM];

/* ---- constants (CNSTNT, SYSCNS) ---- */
static double MASS[NSITE];
static double CHARGE[NSITE];
static double TSTEP, BOXL, BOXH, CUTOFF, CUT2, ALPHA, COULK, ECUT_SHIFT;
static double BOND_OH, BOND_HH, K_OH, K_HH, SOFT_S2, SOFT_EPS;

/* ---- shared state ---- */
static int nmol = 2048, nthreads = 2, nsteps = 4;
static unsigned long seed = 12345;
static site_vec *X[ORDER]; /* X[0] positions, X[1..] scaled derivatives */
static site_vec *FORCE;    /* shared force accumulator (per site) */
static pthread_mutex_t *force_locks;
static int nlocks;
static pthread_mutex_t gl_lock = PTHREAD_MUTEX_INITIALIZER; /* the global sums */
static double gl_kinetic, gl_potential, gl_intra;
static long gl_pairs;
static pthread_barrier_t step_barrier;
static int quiet;

struct worker {
    int id;
    int first, last; /* [first, last) molecules owned */
    site_vec *local_force;
    double *shift;    /* per partner: dx, dy, dz of the O-O min-image vector */
    int *inside;      /* per partner: 1 when within the cutoff */
    pthread_t thread;
    osl_counter_t *pairs_counter;
};
static struct worker workers[MAX_THREADS];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "water: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p)
        die("out of memory");
    return p;
}

/* xorshift64*: deterministic input generation */
static uint64_t rng_state;
static double rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static void CNSTNT(void)
{
    osl_region_begin("CNSTNT");
    MASS[0] = 1.0;
    MASS[1] = MASS[2] = 0.25;
    CHARGE[0] = -0.82;
    CHARGE[1] = CHARGE[2] = 0.41;
    BOND_OH = 0.33;
    BOND_HH = 2.0 * BOND_OH * sin(104.52 / 2.0 * M_PI / 180.0);
    K_OH = 300.0;
    K_HH = 150.0;
    SOFT_S2 = 0.4 * 0.4;
    SOFT_EPS = 0.5;
    COULK = 5.0;
    TSTEP = 0.002;
    osl_region_end("CNSTNT");
}

static void SYSCNS(void)
{
    osl_region_begin("SYSCNS");
    const double density = 0.8;
    BOXL = cbrt(nmol / density);
    BOXH = BOXL / 2.0;
    CUTOFF = BOXH;
    CUT2 = CUTOFF * CUTOFF;
    ALPHA = 2.0 / CUTOFF;
    ECUT_SHIFT = erfc(ALPHA * CUTOFF) / CUTOFF;
    nlocks = (nmol + LOCK_BLOCK - 1) / LOCK_BLOCK;
    osl_region_end("SYSCNS");
}

/* ---- the input file: generated once, read by INITIA ---- */

static void default_input_path(char *out, size_t n)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *dir = "/tmp";
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            if (access(exe, W_OK) == 0)
                dir = exe;
        }
    }
    snprintf(out, n, "%.3900s/water-input-%d-%lu.dat", dir, nmol, seed);
}

static void generate_input(const char *path)
{
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        die(path);
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
    int side = (int)ceil(cbrt((double)nmol));
    double a = BOXL / side;
    fprintf(f, "# oslens water input: molecules %d seed %lu box %.17g\n", nmol, seed, BOXL);
    for (int m = 0; m < nmol; m++) {
        int ix = m % side, iy = (m / side) % side, iz = m / (side * side);
        double o[3] = {(ix + 0.5) * a, (iy + 0.5) * a, (iz + 0.5) * a};
        /* random orientation: two unit vectors at the H-O-H angle */
        double u[3], v[3], w[3];
        for (;;) {
            for (int d = 0; d < 3; d++)
                u[d] = 2 * rnd() - 1;
            double n2 = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
            if (n2 > 1e-3 && n2 <= 1) {
                for (int d = 0; d < 3; d++)
                    u[d] /= sqrt(n2);
                break;
            }
        }
        for (;;) {
            for (int d = 0; d < 3; d++)
                w[d] = 2 * rnd() - 1;
            double dot = w[0] * u[0] + w[1] * u[1] + w[2] * u[2];
            for (int d = 0; d < 3; d++)
                w[d] -= dot * u[d];
            double n2 = w[0] * w[0] + w[1] * w[1] + w[2] * w[2];
            if (n2 > 1e-3) {
                for (int d = 0; d < 3; d++)
                    w[d] /= sqrt(n2);
                break;
            }
        }
        double half = 104.52 / 2.0 * M_PI / 180.0;
        double site[NSITE][3];
        for (int d = 0; d < 3; d++) {
            v[d] = cos(half) * u[d];
            site[0][d] = o[d];
            site[1][d] = o[d] + BOND_OH * (v[d] + sin(half) * w[d]);
            site[2][d] = o[d] + BOND_OH * (v[d] - sin(half) * w[d]);
        }
        double vel[3];
        for (int d = 0; d < 3; d++)
            vel[d] = 0.3 * (rnd() - 0.5);
        for (int s = 0; s < NSITE; s++)
            fprintf(f, "%.17g %.17g %.17g %.17g %.17g %.17g\n", site[s][0], site[s][1], site[s][2],
                    vel[0], vel[1], vel[2]);
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        die(tmp);
    fclose(f);
    if (rename(tmp, path) != 0)
        die(path);
}

/* The input must exist and match the molecule count; otherwise it is (re)generated. */
static int input_matches(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int m = -1;
    unsigned long s = 0;
    int ok = fscanf(f, "# oslens water input: molecules %d seed %lu", &m, &s) == 2 && m == nmol && s == seed;
    fclose(f);
    return ok;
}

/* INITIA: read the molecule file (from disk, unless --warm-input), set up the predictor values. */
static void INITIA(const char *path, int cold)
{
    osl_region_begin("INITIA");
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die(path);
    if (cold) {
        /* drop the file from the page cache so that the read is a real disk read */
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    }
    struct stat st;
    if (fstat(fd, &st) != 0)
        die(path);
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf)
        die("out of memory");
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got < 65536 ? size - got : 65536);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            die(path);
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    buf[got] = 0;
    close(fd);

    for (int k = 0; k < ORDER; k++)
        X[k] = xcalloc((size_t)nmol, sizeof(site_vec));
    FORCE = xcalloc((size_t)nmol, sizeof(site_vec));
    char *p = strchr(buf, '\n');
    if (!p) {
        fprintf(stderr, "water: %s: not a water input file\n", path);
        exit(1);
    }
    p++;
    for (int m = 0; m < nmol; m++) {
        for (int s = 0; s < NSITE; s++) {
            double vals[6];
            for (int k = 0; k < 6; k++) {
                char *end;
                vals[k] = strtod(p, &end);
                if (end == p) {
                    fprintf(stderr, "water: %s: truncated at molecule %d\n", path, m);
                    exit(1);
                }
                p = end;
            }
            for (int d = 0; d < NDIM; d++) {
                X[0][m][s][d] = vals[d];
                X[1][m][s][d] = vals[3 + d] * TSTEP;
            }
        }
    }
    free(buf);
    force_locks = xcalloc((size_t)nlocks, sizeof(pthread_mutex_t));
    for (int i = 0; i < nlocks; i++)
        pthread_mutex_init(&force_locks[i], NULL);
    osl_region_end("INITIA");
}

/* ---- the computation ---- */

static inline double min_image(double d)
{
    if (d > BOXH)
        d -= BOXL;
    else if (d < -BOXH)
        d += BOXL;
    return d;
}

/* Partners of molecule i: the next nmol/2 molecules (mod nmol), each pair counted once. */
static inline int npartners(int i)
{
    int half = nmol / 2;
    if (nmol % 2 == 0 && i >= half)
        return half - 1;
    return half;
}

/* CSHIFT: minimum-image O-O displacement of molecule i to each partner, and whether it is
 * inside the cutoff (the conditional whose outcome bands the procedure's durations). */
static int CSHIFT(struct worker *w, int i)
{
    osl_region_begin("CSHIFT");
    int np = npartners(i), inside = 0;
    const double *oi = X[0][i][0];
    for (int k = 0; k < np; k++) {
        int j = i + 1 + k;
        if (j >= nmol)
            j -= nmol;
        const double *oj = X[0][j][0];
        double dx = min_image(oi[0] - oj[0]);
        double dy = min_image(oi[1] - oj[1]);
        double dz = min_image(oi[2] - oj[2]);
        double *sh = &w->shift[3 * k];
        sh[0] = dx - (oi[0] - oj[0]);
        sh[1] = dy - (oi[1] - oj[1]);
        sh[2] = dz - (oi[2] - oj[2]);
        int in = dx * dx + dy * dy + dz * dz < CUT2;
        w->inside[k] = in;
        inside += in;
    }
    osl_region_end("CSHIFT");
    return np;
}

/* Interaction of the nine site pairs of molecules i and j (j shifted by sh).
 * Adds forces to fi / fj when they are given, and returns the pair energy. */
static double pair_interaction(int i, int j, const double *sh, double (*fi)[NDIM], double (*fj)[NDIM])
{
    double energy = 0.0;
    for (int a = 0; a < NSITE; a++) {
        for (int b = 0; b < NSITE; b++) {
            double d[3], r2 = 0.0;
            for (int k = 0; k < 3; k++) {
                d[k] = X[0][i][a][k] - X[0][j][b][k] + sh[k];
                r2 += d[k] * d[k];
            }
            double r = sqrt(r2), inv2 = 1.0 / r2, fscal = 0.0;
            /* damped, shifted Coulomb */
            double qq = COULK * CHARGE[a] * CHARGE[b];
            double ar = ALPHA * r;
            double erfcr = erfc(ar);
            energy += qq * (erfcr / r - ECUT_SHIFT);
            fscal += qq * (erfcr / r + 2.0 * ALPHA / sqrt(M_PI) * exp(-ar * ar)) * inv2;
            if (a == 0 && b == 0) { /* Lennard-Jones O-O */
                double s6 = inv2 * inv2 * inv2;
                energy += 4.0 * (s6 * s6 - s6);
                fscal += 24.0 * (2.0 * s6 * s6 - s6) * inv2;
            } else { /* soft core */
                double s2 = SOFT_S2 * inv2, s6 = s2 * s2 * s2;
                energy += 4.0 * SOFT_EPS * s6 * s6;
                fscal += 48.0 * SOFT_EPS * s6 * s6 * inv2;
            }
            if (fi) {
                for (int k = 0; k < 3; k++) {
                    fi[a][k] += fscal * d[k];
                    fj[b][k] -= fscal * d[k];
                }
            }
        }
    }
    return energy;
}

/* UPDATE_FORCES: add this thread's forces on one block of molecules to the shared array. */
static void UPDATE_FORCES(struct worker *w, int block)
{
    osl_region_begin("UPDATE_FORCES");
    int lo = block * LOCK_BLOCK, hi = lo + LOCK_BLOCK < nmol ? lo + LOCK_BLOCK : nmol;
    pthread_mutex_lock(&force_locks[block]);
    for (int m = lo; m < hi; m++)
        for (int s = 0; s < NSITE; s++)
            for (int d = 0; d < NDIM; d++)
                FORCE[m][s][d] += w->local_force[m][s][d];
    pthread_mutex_unlock(&force_locks[block]);
    osl_region_end("UPDATE_FORCES");
}

/* INTERF: intermolecular forces of the owned molecules with their partners, then the
 * global communication: forces added under per-block locks. */
static void INTERF(struct worker *w)
{
    osl_region_begin("INTERF");
    memset(w->local_force, 0, (size_t)nmol * sizeof(site_vec));
    long pairs = 0;
    for (int i = w->first; i < w->last; i++) {
        int np = CSHIFT(w, i);
        for (int k = 0; k < np; k++) {
            if (!w->inside[k])
                continue;
            int j = i + 1 + k;
            if (j >= nmol)
                j -= nmol;
            pair_interaction(i, j, &w->shift[3 * k], w->local_force[i], w->local_force[j]);
            pairs++;
        }
    }
    /* start at a different block in each thread to spread lock contention */
    int start = (int)((long)w->id * nlocks / nthreads);
    for (int b = 0; b < nlocks; b++)
        UPDATE_FORCES(w, (start + b) % nlocks);
    osl_count(w->pairs_counter, pairs);
    pthread_mutex_lock(&gl_lock);
    gl_pairs += pairs;
    pthread_mutex_unlock(&gl_lock);
    osl_region_end("INTERF");
}

/* INTRAF: intramolecular spring forces of the owned molecules (written to the shared array:
 * each thread owns its molecules' rows, and INTERF runs after a barrier). */
static void INTRAF(struct worker *w)
{
    osl_region_begin("INTRAF");
    static const int bond[3][2] = {{0, 1}, {0, 2}, {1, 2}};
    double e = 0.0;
    for (int m = w->first; m < w->last; m++) {
        memset(FORCE[m], 0, sizeof(site_vec));
        for (int b = 0; b < 3; b++) {
            int s = bond[b][0], t = bond[b][1];
            double k = b < 2 ? K_OH : K_HH, r0 = b < 2 ? BOND_OH : BOND_HH;
            double d[3], r2 = 0.0;
            for (int q = 0; q < 3; q++) {
                d[q] = X[0][m][s][q] - X[0][m][t][q];
                r2 += d[q] * d[q];
            }
            double r = sqrt(r2), dr = r - r0;
            e += 0.5 * k * dr * dr;
            double fscal = -k * dr / r;
            for (int q = 0; q < 3; q++) {
                FORCE[m][s][q] += fscal * d[q];
                FORCE[m][t][q] -= fscal * d[q];
            }
        }
    }
    pthread_mutex_lock(&gl_lock);
    gl_intra += e;
    pthread_mutex_unlock(&gl_lock);
    osl_region_end("INTRAF");
}

static void PREDIC(struct worker *w)
{
    osl_region_begin("PREDIC");
    for (int m = w->first; m < w->last; m++)
        for (int s = 0; s < NSITE; s++)
            for (int d = 0; d < NDIM; d++) {
                double x0 = X[0][m][s][d], x1 = X[1][m][s][d], x2 = X[2][m][s][d], x3 = X[3][m][s][d];
                X[0][m][s][d] = x0 + x1 + x2 + x3;
                X[1][m][s][d] = x1 + 2.0 * x2 + 3.0 * x3;
                X[2][m][s][d] = x2 + 3.0 * x3;
            }
    osl_region_end("PREDIC");
}

static void CORREC(struct worker *w)
{
    osl_region_begin("CORREC");
    static const double c[ORDER] = {1.0 / 6.0, 5.0 / 6.0, 1.0, 1.0 / 3.0};
    for (int m = w->first; m < w->last; m++)
        for (int s = 0; s < NSITE; s++)
            for (int d = 0; d < NDIM; d++) {
                double acc2 = 0.5 * TSTEP * TSTEP * FORCE[m][s][d] / MASS[s];
                double delta = acc2 - X[2][m][s][d];
                for (int k = 0; k < ORDER; k++)
                    X[k][m][s][d] += c[k] * delta;
            }
    osl_region_end("CORREC");
}

/* BNDRY: fold molecules whose oxygen left the box back in (the whole molecule moves). */
static void BNDRY(struct worker *w)
{
    osl_region_begin("BNDRY");
    for (int m = w->first; m < w->last; m++)
        for (int d = 0; d < NDIM; d++) {
            double shift = 0.0;
            if (X[0][m][0][d] < 0.0)
                shift = BOXL;
            else if (X[0][m][0][d] >= BOXL)
                shift = -BOXL;
            if (shift != 0.0)
                for (int s = 0; s < NSITE; s++)
                    X[0][m][s][d] += shift;
        }
    osl_region_end("BNDRY");
}

static void KINETI(struct worker *w)
{
    osl_region_begin("KINETI");
    double e = 0.0;
    for (int m = w->first; m < w->last; m++)
        for (int s = 0; s < NSITE; s++)
            for (int d = 0; d < NDIM; d++) {
                double v = X[1][m][s][d] / TSTEP;
                e += 0.5 * MASS[s] * v * v;
            }
    pthread_mutex_lock(&gl_lock);
    gl_kinetic += e;
    pthread_mutex_unlock(&gl_lock);
    osl_region_end("KINETI");
}

/* POTENG: intermolecular potential energy of the owned molecules' pairs (a separate pass over
 * the pairs, as in the original), summed into the global under the lock. */
static void POTENG(struct worker *w)
{
    osl_region_begin("POTENG");
    double e = 0.0;
    for (int i = w->first; i < w->last; i++) {
        int np = CSHIFT(w, i);
        for (int k = 0; k < np; k++) {
            if (!w->inside[k])
                continue;
            int j = i + 1 + k;
            if (j >= nmol)
                j -= nmol;
            e += pair_interaction(i, j, &w->shift[3 * k], NULL, NULL);
        }
    }
    pthread_mutex_lock(&gl_lock);
    gl_potential += e;
    pthread_mutex_unlock(&gl_lock);
    osl_region_end("POTENG");
}

static void barrier(void)
{
    pthread_barrier_wait(&step_barrier);
}

/* MDMAIN: the per-thread computation (child initialisation, then the time steps). */
static void MDMAIN(struct worker *w)
{
    osl_region_begin("MDMAIN");
    osl_region_begin("SETUP");
    w->local_force = xcalloc((size_t)nmol, sizeof(site_vec));
    w->shift = xcalloc((size_t)nmol, 3 * sizeof(double));
    w->inside = xcalloc((size_t)nmol, sizeof(int));
    /* first touch of the owned rows, and the initial forces */
    INTRAF(w);
    barrier();
    INTERF(w);
    barrier();
    for (int m = w->first; m < w->last; m++)
        for (int s = 0; s < NSITE; s++)
            for (int d = 0; d < NDIM; d++)
                X[2][m][s][d] = 0.5 * TSTEP * TSTEP * FORCE[m][s][d] / MASS[s];
    osl_region_end("SETUP");
    barrier();

    for (int step = 1; step <= nsteps; step++) {
        osl_region_begin("STEP");
        if (w->id == 0) {
            int32_t s = step;
            osl_event(1, &s, sizeof s);
            gl_kinetic = gl_potential = gl_intra = 0.0;
        }
        barrier();
        PREDIC(w);
        INTRAF(w);
        barrier();
        INTERF(w);
        barrier();
        CORREC(w);
        BNDRY(w);
        KINETI(w);
        barrier();
        POTENG(w);
        barrier();
        if (w->id == 0 && !quiet)
            printf("step %3d  kinetic %14.6f  potential %14.6f  intramolecular %12.6f\n", step, gl_kinetic,
                   gl_potential, gl_intra);
        osl_region_end("STEP");
    }
    osl_region_end("MDMAIN");
}

static void *child_main(void *arg)
{
    struct worker *w = arg;
    char name[32];
    snprintf(name, sizeof name, "water child %d", w->id); /* fits the kernel's 15-character comm */
    osl_thread_name(name);
    pthread_setname_np(pthread_self(), name);
    MDMAIN(w);
    return NULL;
}

static void usage(int code)
{
    fprintf(code ? stderr : stdout,
            "usage: water [--threads N] [--steps S] [--molecules M] [--input FILE] [--warm-input]\n"
            "             [--output FILE] [--seed N] [--quiet]\n"
            "A parallel molecular dynamics code in the spirit of SPLASH WATER, instrumented with oslens.\n"
            "  --threads N     computation threads, the parent included (default 2)\n"
            "  --steps S       time steps (default 4)\n"
            "  --molecules M   water molecules (default 2048)\n"
            "  --input FILE    molecule file; generated when missing (default: beside the program)\n"
            "  --warm-input    read the input from the page cache instead of dropping it first\n"
            "  --output FILE   write the final positions to FILE (synced to disk)\n");
    exit(code);
}

static long parse_num(const char *opt, const char *val, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || errno || *end || v < lo || v > hi) {
        fprintf(stderr, "water: %s needs a number from %ld to %ld\n", opt, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    const char *input = NULL, *output = NULL;
    int cold = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--threads"))
            nthreads = (int)parse_num(a, v, 1, MAX_THREADS), i++;
        else if (!strcmp(a, "--steps"))
            nsteps = (int)parse_num(a, v, 0, 1000000), i++;
        else if (!strcmp(a, "--molecules"))
            nmol = (int)parse_num(a, v, 8, 1000000), i++;
        else if (!strcmp(a, "--seed"))
            seed = (unsigned long)parse_num(a, v, 0, LONG_MAX), i++;
        else if (!strcmp(a, "--input") && v)
            input = v, i++;
        else if (!strcmp(a, "--output") && v)
            output = v, i++;
        else if (!strcmp(a, "--warm-input"))
            cold = 0;
        else if (!strcmp(a, "--quiet"))
            quiet = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            usage(0);
        else {
            fprintf(stderr, "water: unknown or incomplete option '%s'\n", a);
            usage(2);
        }
    }
    if (nthreads > nmol)
        nthreads = nmol;

    double t0 = now_s();
    osl_thread_name("water parent");
    osl_event_name(1, "timestep");
    osl_region_begin("main");
    CNSTNT();
    SYSCNS();

    char pathbuf[PATH_MAX];
    if (!input) {
        default_input_path(pathbuf, sizeof pathbuf);
        input = pathbuf;
    }
    if (!input_matches(input)) {
        osl_region_begin("GENERATE_INPUT");
        generate_input(input);
        osl_region_end("GENERATE_INPUT");
    }
    INITIA(input, cold);

    /* static partition of the molecules */
    for (int t = 0; t < nthreads; t++) {
        workers[t].id = t;
        workers[t].first = (int)((long)nmol * t / nthreads);
        workers[t].last = (int)((long)nmol * (t + 1) / nthreads);
        workers[t].pairs_counter = osl_counter("pairs_in_cutoff", NULL);
    }
    pthread_barrier_init(&step_barrier, NULL, (unsigned)nthreads);

    osl_region_begin("FORK");
    for (int t = 1; t < nthreads; t++) {
        int rc = pthread_create(&workers[t].thread, NULL, child_main, &workers[t]);
        if (rc) {
            errno = rc;
            die("pthread_create");
        }
    }
    osl_region_end("FORK");

    osl_region_begin("WorkStart");
    MDMAIN(&workers[0]);
    osl_region_end("WorkStart");

    osl_region_begin("JOIN");
    for (int t = 1; t < nthreads; t++)
        pthread_join(workers[t].thread, NULL);
    osl_region_end("JOIN");

    if (output) {
        osl_region_begin("OUTPUT");
        FILE *f = fopen(output, "w");
        if (!f)
            die(output);
        for (int m = 0; m < nmol; m++)
            for (int s = 0; s < NSITE; s++)
                fprintf(f, "%.17g %.17g %.17g\n", X[0][m][s][0], X[0][m][s][1], X[0][m][s][2]);
        if (fflush(f) != 0 || fsync(fileno(f)) != 0)
            die(output);
        fclose(f);
        osl_region_end("OUTPUT");
    }
    osl_region_end("main");
    if (!quiet)
        printf("water: %d molecules, %d threads, %d steps, %ld pair interactions, %.3f s\n", nmol, nthreads,
               nsteps, gl_pairs, now_s() - t0);
    return 0;
}
