/* A program whose main thread ends through _exit while another thread
 * keeps signalling it: a handler installed without SA_RESTART, as many
 * programs' are (and a shell's SIGCHLD handler, or a profiler's own
 * signal, can land the same way). Every blocking call the main thread
 * makes on its way out returns early with EINTR. */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "spin.h"

static pthread_t main_thread;

static void on_usr1(int signal) { (void)signal; }

static void *nag(void *arg) {
    (void)arg;
    for (;;) {
        pthread_kill(main_thread, SIGUSR1);
        usleep(100);
    }
    return NULL;
}

__attribute__((noinline)) void work_before_exit(void) {
    spin_until(0.2);
}

int main(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_usr1;
    sigaction(SIGUSR1, &action, NULL);
    main_thread = pthread_self();
    pthread_t t;
    pthread_create(&t, NULL, nag, NULL);
    work_before_exit();
    _exit(0);
}
