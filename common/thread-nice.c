/* SPDX-License-Identifier: MIT */
/* Thread priorities: per-thread nice values through setpriority(2) on the thread's id. */
#include <errno.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/thread-nice.h"

/* Written once before any thread starts; pthread_create() orders it before their reads. */
static bool base_known;
static int base_nice;

void thread_nice_init(void)
{
        base_nice = thread_nice_get();
        base_known = true;
}

int thread_nice_get(void)
{
        int nice;

        /* -1 is a nice value too: only errno tells a failure (none for the caller's own thread) */
        errno = 0;
        nice = getpriority(PRIO_PROCESS, (id_t)gettid());
        return errno == 0 ? nice : 0;
}

int thread_nice_set(int nice)
{
        if (nice < -20 || nice > 19)
                return -EINVAL;
        if (setpriority(PRIO_PROCESS, (id_t)gettid(), nice) < 0)
                return -errno;
        return 0;
}

void thread_nice_worker(void)
{
        if (base_known && thread_nice_get() != base_nice)
                (void)thread_nice_set(base_nice);
}
