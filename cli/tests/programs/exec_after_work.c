/* Works one CPU-second in `before_exec`, then execs itself with the
 * argument `after`, which works a little in `after_exec` and exits. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "spin.h"

__attribute__((noinline)) void before_exec(void) {
    spin_until(1.0);
}

__attribute__((noinline)) void after_exec(void) {
    spin_until(thread_cpu() + 0.2);
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
