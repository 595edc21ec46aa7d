/* SPDX-License-Identifier: MIT */
/* kvdistd: the per-node kvdist daemon. */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/config.h"
#include "daemon/daemon.h"
#include "common/log.h"
#include "common/thread-nice.h"

/*
 * A request of 100,000 blocks makes plans and copy lists of several MiB on the control loop. By
 * default glibc maps such arrays afresh and unmaps them when freed, and trims the heap's top, so
 * every request faults in and zeroes its pages again: two thirds of the loop's time for such a
 * request (perf). Up to 32 MiB they now come from the heap, and up to 64 MiB of free heap stays
 * mapped for the next request.
 */
static void tune_malloc(void)
{
        (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
        (void)mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

int main(int argc, char **argv)
{
        _cleanup_free_ char *error = NULL;
        Config *config = NULL;
        Daemon *d = NULL;
        sigset_t stop_signals;
        int r;

        tune_malloc();
        /* before any thread: the workers return to this nice when the control loop is raised */
        thread_nice_init();
        r = config_new(&config);
        if (r < 0) {
                fprintf(stderr, "kvdistd: out of memory\n");
                return EXIT_FAILURE;
        }
        r = config_parse_argv(config, argc, argv, &error);
        if (r != 0) {
                config_free(config);
                if (r > 0)
                        return EXIT_SUCCESS;
                fprintf(stderr, "kvdistd: %s\n", error ? error : "invalid arguments");
                return 2;
        }
        log_set_max_level(config->log_level);

        r = daemon_new(config, &d);
        if (r < 0)
                return EXIT_FAILURE;
        d->argc = argc;
        d->argv = argv;
        r = daemon_run(d);
        /*
         * Freeing the signal events puts the default actions back; a second
         * SIGTERM during teardown must not turn a clean stop into a death by
         * signal. Blocked signals stay pending and die with the process.
         */
        sigemptyset(&stop_signals);
        sigaddset(&stop_signals, SIGTERM);
        sigaddset(&stop_signals, SIGINT);
        sigaddset(&stop_signals, SIGHUP);
        (void)sigprocmask(SIG_BLOCK, &stop_signals, NULL);
        daemon_free(d);
        log_info("stopped");
        return r;
}
