/* A program that handles its signals with `signalfd`, as event loops and
 * daemons do: every signal is blocked in the main thread before any
 * other starts, so every thread blocks every signal, btprof's profiling
 * signal included. Two workers burn 0.4 s of CPU each in `work`. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "spin.h"

__attribute__((noinline)) void work(double seconds) {
    spin_until(seconds);
}

void *worker(void *arg) {
    (void)arg;
    work(0.4);
    return NULL;
}

int main(void) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    int fd = signalfd(-1, &all, 0);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    close(fd);
    printf("workers done\n");
    return 0;
}
