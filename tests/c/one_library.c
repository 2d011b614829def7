/* one_library.c: a program linked with liboslens (oslens.h) that also takes pthread mutexes, for
 * tests/test_one_library.py: which liboslens objects its process maps, and what it records.
 *
 *   one_library N   N lock/unlock pairs of a mutex in a second thread, one oslens event, then one
 *                   JSON line: {"copies": distinct mapped files named liboslens*.so,
 *                   "preload_entries": words of LD_PRELOAD naming liboslens, "locks": N} */
#include <oslens.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int n;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

/* distinct paths of mapped files whose name starts with liboslens and ends in .so */
static int mapped_copies(void) {
    char line[4096], seen[8][4096];
    int count = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/');
        if (!path)
            continue;
        path[strcspn(path, "\n")] = 0;
        const char *base = strrchr(path, '/') + 1;
        size_t len = strlen(base);
        if (strncmp(base, "liboslens", 9) != 0 || len < 3 || strcmp(base + len - 3, ".so") != 0)
            continue;
        int known = 0;
        for (int i = 0; i < count; i++)
            known |= strcmp(seen[i], path) == 0;
        if (!known && count < 8)
            strcpy(seen[count++], path);
    }
    fclose(f);
    return count;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 10;
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    osl_event(1, "done", 4);
    int entries = 0;
    const char *pre = getenv("LD_PRELOAD");
    for (const char *p = pre; p && (p = strstr(p, "liboslens")); p++)
        entries++;
    printf("{\"copies\": %d, \"preload_entries\": %d, \"locks\": %d}\n", mapped_copies(), entries, n);
    return 0;
}
