/* The process `btprof dump --pid` is tested on (cli/tests/dump_pid.rs).
 *
 * Threads, each inside a named function of its own:
 *   sleep_in_nanosleep  nanosleep(1 ms) in a loop
 *   wait_in_read        read() on a pipe nobody writes to until the end
 *   wait_in_epoll       epoll_wait() with no timeout on that pipe
 *   spin_in_loop        a busy loop computing a fixed checksum per round
 * Every blocking call checks for EINTR itself and counts it. main prints
 * "ready" once every thread has started (a thread not yet scheduled sits
 * at its first instruction in clone3, with no stack to walk; beside busy
 * processes that lasts milliseconds), and waits for a line (or end of
 * file) on stdin; then it stops
 * the threads and prints "eintr=N mismatches=M rounds=R result=0xX":
 * EINTR seen by any call, busy rounds whose checksum differed from the
 * first one, busy rounds done, and that checksum (the same in every run).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

static volatile int stop;
/* Threads that reached their start function. */
static int started;
static long eintr, mismatches, rounds;
static uint64_t first_result;
static int pipe_fds[2];

static void count_eintr(const char *call) {
    __atomic_add_fetch(&eintr, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "EINTR from %s\n", call);
}

__attribute__((noinline)) static void sleep_in_nanosleep(void) {
    while (!stop) {
        struct timespec t = {0, 1000000};
        if (nanosleep(&t, NULL) != 0 && errno == EINTR)
            count_eintr("nanosleep");
    }
}

__attribute__((noinline)) static void wait_in_read(void) {
    char c;
    for (;;) {
        ssize_t n = read(pipe_fds[0], &c, 1);
        if (n < 0 && errno == EINTR) {
            count_eintr("read");
            continue;
        }
        return;
    }
}

__attribute__((noinline)) static void wait_in_epoll(int epfd) {
    struct epoll_event ev;
    for (;;) {
        int n = epoll_wait(epfd, &ev, 1, -1);
        if (n < 0 && errno == EINTR) {
            count_eintr("epoll_wait");
            continue;
        }
        return;
    }
}

/* Read on every round, so the compiler cannot compute a round once. */
static volatile uint64_t seed = 0x9e3779b97f4a7c15ull;

__attribute__((noinline)) static uint64_t one_round(void) {
    uint64_t x = seed, sum = 0;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        sum += x;
    }
    return sum;
}

__attribute__((noinline)) static void spin_in_loop(void) {
    do {
        uint64_t r = one_round();
        if (rounds == 0)
            first_result = r;
        else if (r != first_result)
            mismatches++;
        rounds++;
    } while (!stop);
}

static void *sleeper(void *arg) {
    (void)arg;
    __atomic_add_fetch(&started, 1, __ATOMIC_RELAXED);
    sleep_in_nanosleep();
    return NULL;
}

static void *reader(void *arg) {
    (void)arg;
    __atomic_add_fetch(&started, 1, __ATOMIC_RELAXED);
    wait_in_read();
    return NULL;
}

static void *epoller(void *arg) {
    (void)arg;
    __atomic_add_fetch(&started, 1, __ATOMIC_RELAXED);
    int epfd = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(epfd, EPOLL_CTL_ADD, pipe_fds[0], &ev);
    wait_in_epoll(epfd);
    close(epfd);
    return NULL;
}

static void *spinner(void *arg) {
    (void)arg;
    __atomic_add_fetch(&started, 1, __ATOMIC_RELAXED);
    spin_in_loop();
    return NULL;
}

int main(void) {
    if (pipe(pipe_fds) != 0)
        return 1;
    pthread_t threads[4];
    void *(*starts[4])(void *) = {sleeper, reader, epoller, spinner};
    const char *names[4] = {"sleeper", "reader", "epoller", "spinner"};
    for (int i = 0; i < 4; i++) {
        pthread_create(&threads[i], NULL, starts[i], NULL);
        pthread_setname_np(threads[i], names[i]);
    }
    while (__atomic_load_n(&started, __ATOMIC_RELAXED) < 4)
        usleep(1000);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin) == NULL && errno == EINTR && !feof(stdin))
        count_eintr("fgets");
    stop = 1;
    /* Wakes the reader (one byte) and the epoll waiter (the pipe stays
     * readable with the second). */
    if (write(pipe_fds[1], "xx", 2) != 2)
        return 1;
    for (int i = 0; i < 4; i++)
        pthread_join(threads[i], NULL);
    printf("eintr=%ld mismatches=%ld rounds=%ld result=%#llx\n", eintr, mismatches, rounds,
           (unsigned long long)first_result);
    return 0;
}
