/* Works one CPU-second in `before_exec`, then execs itself with the
 * argument `after`, which works a little in `after_exec` and exits. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void before_exec(void) {
    while (thread_cpu() < 1.0)
        for (int i = 0; i < 20000; i++) sink += i;
}

__attribute__((noinline)) void after_exec(void) {
    double start = thread_cpu();
    while (thread_cpu() < start + 0.2)
        for (int i = 0; i < 20000; i++) sink += i;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "after") == 0) {
        after_exec();
        return 0;
    }
    before_exec();
    printf("before %.6f\n", thread_cpu());
    fflush(stdout);
    char *args[] = {argv[0], "after", NULL};
    execv("/proc/self/exe", args);
    perror("execv");
    return 1;
}
