/* What the test programs share: the calling thread's CPU clock, and a
 * spin on it that each program's named functions run, so that their
 * samples land in those functions. */
#include <time.h>

static volatile unsigned long sink;

/* The calling thread's CPU time, in seconds. */
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Burns CPU until the calling thread used `end` seconds of it. Always
 * inlined: the loop is then code of the function that calls it, as if
 * written there, however the program is optimised. */
static inline __attribute__((always_inline)) void spin_until(double end) {
    while (thread_cpu() < end)
        for (int i = 0; i < 20000; i++) sink += i;
}
