/* Two worker threads with a known CPU split: `alpha` burns twice the CPU
 * time of `beta`. Each measures its own CPU time with
 * CLOCK_THREAD_CPUTIME_ID and the program prints it, so a test compares
 * the profile with what the threads really got, on a busy machine too.
 *
 *   two_threads [SCALE [SETTLE]]
 *
 * SCALE multiplies both threads' CPU time (1.0 s and 0.5 s). SETTLE
 * seconds, if given, each thread sleeps before it burns: for a profiler
 * that can walk a new thread's stack only some time after its birth. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "spin.h"

/* Burns until this thread used `seconds` of CPU time. */
__attribute__((noinline)) void alpha(double seconds) {
    spin_until(seconds);
}

__attribute__((noinline)) void beta(double seconds) {
    spin_until(seconds);
}

static double scale = 1.0;
static double settle = 0.0;
static double used[2];

static void wait_settle(void) {
    struct timespec ts = {(time_t)settle, (long)((settle - (time_t)settle) * 1e9)};
    if (settle > 0) nanosleep(&ts, NULL);
}

void *start_alpha(void *arg) {
    (void)arg;
    wait_settle();
    alpha(1.0 * scale);
    used[0] = thread_cpu();
    return NULL;
}

void *start_beta(void *arg) {
    (void)arg;
    wait_settle();
    beta(0.5 * scale);
    used[1] = thread_cpu();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) scale = atof(argv[1]);
    if (argc > 2) settle = atof(argv[2]);
    pthread_t a, b;
    pthread_create(&a, NULL, start_alpha, NULL);
    pthread_create(&b, NULL, start_beta, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("alpha %.6f\nbeta %.6f\n", used[0], used[1]);
    return 0;
}
