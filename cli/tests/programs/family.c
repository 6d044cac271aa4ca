/* A family of processes for the tests of what the preloaded library
 * says: the parent tries an exec that fails (the library writes its
 * profile and starts again, twice in one image), forks CHILDREN
 * children that each exec this program as `family child`, works in
 * `parent_work` and waits for them. Each child works in `child_work`
 * and exits. Prints `children N ok` with the number that exited 0.
 *
 * With TAKE_URG=1 in the environment, a constructor installs a SIGURG
 * handler in every process of the family before `main`: the profiling
 * signal is then the program's own when profiling would start. With
 * TAKE_URG=late, `main` installs it first thing, after profiling
 * started. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spin.h"

#define CHILDREN 3

static volatile sig_atomic_t urgent;

static void on_urg(int sig) {
    (void)sig;
    urgent = 1;
}

/* Installs the SIGURG handler if TAKE_URG is `when`. */
static void take_urg(const char *when) {
    const char *take = getenv("TAKE_URG");
    if (take && strcmp(take, when) == 0) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = on_urg;
        sigaction(SIGURG, &action, NULL);
    }
}

__attribute__((constructor)) static void take_urg_early(void) {
    take_urg("1");
}

__attribute__((noinline)) void child_work(void) {
    spin_until(thread_cpu() + 0.1);
}

__attribute__((noinline)) void parent_work(void) {
    spin_until(thread_cpu() + 0.2);
}

int main(int argc, char **argv) {
    take_urg("late");
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        child_work();
        return 0;
    }
    char *missing[] = {"/nonexistent/btprof-family", NULL};
    execv(missing[0], missing);
    pid_t children[CHILDREN];
    for (int i = 0; i < CHILDREN; i++) {
        children[i] = fork();
        if (children[i] == 0) {
            char *args[] = {argv[0], "child", NULL};
            execv("/proc/self/exe", args);
            _exit(127);
        }
    }
    parent_work();
    int ok = 0;
    for (int i = 0; i < CHILDREN; i++) {
        int status = 0;
        if (children[i] > 0 && waitpid(children[i], &status, 0) == children[i] &&
            WIFEXITED(status) && WEXITSTATUS(status) == 0)
            ok++;
    }
    printf("children %d ok\n", ok);
    return 0;
}
