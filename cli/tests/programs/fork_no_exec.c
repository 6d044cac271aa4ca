/* Forks without exec: the child works in `child_work` and exits through
 * exit(), running the inherited atexit handlers; the parent works in
 * `parent_work` and waits for it. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void child_work(void) {
    double start = thread_cpu();
    while (thread_cpu() < start + 0.3)
        for (int i = 0; i < 20000; i++) sink += i;
}

__attribute__((noinline)) void parent_work(void) {
    double start = thread_cpu();
    while (thread_cpu() < start + 0.3)
        for (int i = 0; i < 20000; i++) sink += i;
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
