/* A pool that replaces its threads: 10 rounds of 100 threads started
 * together, each burning 4 ms of its own CPU time in `burst`, as servers
 * that start a thread per task do. */
#include <pthread.h>
#include <stdio.h>

#include "spin.h"

__attribute__((noinline)) void burst(void) {
    spin_until(thread_cpu() + 0.004);
}

void *task(void *arg) {
    (void)arg;
    burst();
    return NULL;
}

int main(void) {
    for (int round = 0; round < 10; round++) {
        pthread_t t[100];
        for (int i = 0; i < 100; i++) pthread_create(&t[i], NULL, task, NULL);
        for (int i = 0; i < 100; i++) pthread_join(t[i], NULL);
    }
    printf("rounds done\n");
    return 0;
}
