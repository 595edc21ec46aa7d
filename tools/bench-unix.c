/* SPDX-License-Identifier: MIT */
/*
 * kvdist-bench's small-call baseline: a round trip over a Unix stream socket to an echo thread,
 * the least any call to the daemon costs.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench-unix.h"

#define BENCH_UNIX_MAX_MSG 4096

struct BenchUnix {
        int fd[2]; /* fd[0] ours, fd[1] the echo thread's */
        size_t msg_bytes;
        pthread_t thread;
        bool started;
        uint8_t buf[BENCH_UNIX_MAX_MSG];
};

static double now_ns(void)
{
        struct timespec ts;

        (void)clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Reads or writes exactly @len bytes; false on EOF or an error. */
static bool full_io(int fd, uint8_t *p, size_t len, bool writing)
{
        while (len > 0) {
                ssize_t n = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return false;
                p += n;
                len -= (size_t)n;
        }
        return true;
}

static void *echo_thread(void *userdata)
{
        BenchUnix *u = userdata;
        uint8_t buf[BENCH_UNIX_MAX_MSG];

        while (full_io(u->fd[1], buf, u->msg_bytes, false) &&
               full_io(u->fd[1], buf, u->msg_bytes, true))
                ;
        return NULL;
}

BenchUnix *bench_unix_free(BenchUnix *u)
{
        if (!u)
                return NULL;
        /* EOF on the echo thread's socket ends its loop */
        if (u->fd[0] >= 0)
                (void)shutdown(u->fd[0], SHUT_RDWR);
        if (u->started)
                (void)pthread_join(u->thread, NULL);
        safe_close(u->fd[0]);
        safe_close(u->fd[1]);
        free(u);
        return NULL;
}

int bench_unix_new(size_t msg_bytes, BenchUnix **ret)
{
        _cleanup_(bench_unix_freep) BenchUnix *u = NULL;
        int r;

        if (msg_bytes < 1 || msg_bytes > BENCH_UNIX_MAX_MSG)
                return -EINVAL;
        u = calloc(1, sizeof(*u));
        if (!u)
                return -ENOMEM;
        u->fd[0] = u->fd[1] = -1;
        u->msg_bytes = msg_bytes;
        memset(u->buf, 0x5a, msg_bytes);
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, u->fd) < 0)
                return -errno;
        r = pthread_create(&u->thread, NULL, echo_thread, u);
        if (r != 0)
                return -r;
        u->started = true;
        *ret = TAKE_PTR(u);
        return 0;
}

double bench_unix_round(BenchUnix *u)
{
        double t0 = now_ns();

        if (!full_io(u->fd[0], u->buf, u->msg_bytes, true) ||
            !full_io(u->fd[0], u->buf, u->msg_bytes, false))
                return -1;
        return now_ns() - t0;
}
