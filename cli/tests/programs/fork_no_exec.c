/* Forks without exec: the child works in `child_work` and exits through
 * exit(), running the inherited atexit handlers; the parent works in
 * `parent_work` and waits for it. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spin.h"

__attribute__((noinline)) void child_work(void) {
    spin_until(thread_cpu() + 0.3);
}

__attribute__((noinline)) void parent_work(void) {
    spin_until(thread_cpu() + 0.3);
}

int main(void) {
    pid_t child = fork();
    if (child == 0) {
        child_work();
        exit(0);
    }
    parent_work();
    int status = 0;
    waitpid(child, &status, 0);
    printf("child %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return 0;
}
