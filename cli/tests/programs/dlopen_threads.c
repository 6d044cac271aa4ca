/* Loads and unloads libraries from many threads at once, from a
 * constructor (while the dynamic loader is still starting the program)
 * and from main: a preloaded library that created threads under the
 * loader's lock, or took it in the wrong order, would deadlock here. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 8
#define ROUNDS 200

static const char *libs[4];
static int failures;

static void *churn(void *arg) {
    long id = (long)arg;
    for (int r = 0; r < ROUNDS; r++) {
        void *h = dlopen(libs[(id + r) % 4], RTLD_NOW | RTLD_LOCAL);
        if (!h) { __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED); continue; }
        int (*f)(int) = (int (*)(int))dlsym(h, "plus_one");
        if (!f || f(r) != r + 1) __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        dlclose(h);
    }
    return NULL;
}

static void run(void) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, churn, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
}

static void set_libs(void) {
    const char *dir = getenv("DLOPEN_DIR");
    static char paths[4][4096];
    for (int i = 0; i < 4; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/libplus%d.so", dir ? dir : ".", i);
        libs[i] = paths[i];
    }
}

__attribute__((constructor)) static void early(void) {
    set_libs();
    run();
}

int main(void) {
    run();
    printf("failures %d\n", failures);
    return failures != 0;
}
