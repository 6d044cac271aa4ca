/* Works one CPU-second in `before_exec`, then execs itself with the
 * argument `after`, which works a little in `after_exec` and exits.
 *
 * The first argument names the exec function to call (default execv):
 * execv, execve, execl, execle, execvp or execlp, or `syscall`: the
 * execve system call made directly, which no preloaded library sees. The
 * `p` ones are given the file name alone, found on PATH. The new image gets five more
 * arguments, so that a list function's arguments (and `execle`'s
 * environment) go past the six a call passes in registers on x86_64;
 * it checks them, and that EXEC_MARK=1 is in its environment when the
 * old one's was, and exits 3 if not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "spin.h"

extern char **environ;

__attribute__((noinline)) void before_exec(void) {
    spin_until(1.0);
}

__attribute__((noinline)) void after_exec(void) {
    spin_until(thread_cpu() + 0.2);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "after") == 0) {
        const char *want[] = {"x1", "x2", "x3", "x4", "x5"};
        if (argc != 7)
            return 3;
        for (int i = 0; i < 5; i++)
            if (strcmp(argv[2 + i], want[i]) != 0)
                return 3;
        const char *mark = getenv("EXEC_MARK");
        if (!mark || strcmp(mark, "1") != 0)
            return 3;
        after_exec();
        return 0;
    }
    const char *how = argc > 1 ? argv[1] : "execv";
    const char *self = "/proc/self/exe";
    const char *file = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    before_exec();
    printf("before %.6f\n", thread_cpu());
    fflush(stdout);
    char *args[] = {argv[0], "after", "x1", "x2", "x3", "x4", "x5", NULL};
    if (strcmp(how, "execv") == 0)
        execv(self, args);
    else if (strcmp(how, "execve") == 0)
        execve(self, args, environ);
    else if (strcmp(how, "execl") == 0)
        execl(self, argv[0], "after", "x1", "x2", "x3", "x4", "x5", (char *)NULL);
    else if (strcmp(how, "execle") == 0)
        execle(self, argv[0], "after", "x1", "x2", "x3", "x4", "x5", (char *)NULL, environ);
    else if (strcmp(how, "execvp") == 0)
        execvp(file, args);
    else if (strcmp(how, "execlp") == 0)
        execlp(file, argv[0], "after", "x1", "x2", "x3", "x4", "x5", (char *)NULL);
    else if (strcmp(how, "syscall") == 0)
        syscall(SYS_execve, self, args, environ);
    else {
        fprintf(stderr, "unknown exec function %s\n", how);
        return 2;
    }
    perror(how);
    return 1;
}
