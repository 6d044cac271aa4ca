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
 * written there, however the program is optimised.
 *
 * A thread's CPU clock is read by a system call (the vDSO does not serve
 * it), and kernel time is not sampled on the perf clock, as with perf
 * record's `:u` events: read every 20,000 rounds, a tenth of the
 * program's CPU time went to the kernel and its rate came out at 90% of
 * --hz. Every 200,000 rounds (a few hundred microseconds) the kernel's
 * part is under one percent. */
static inline __attribute__((always_inline)) void spin_until(double end) {
    while (thread_cpu() < end)
        for (int i = 0; i < 200000; i++) sink += i;
}
