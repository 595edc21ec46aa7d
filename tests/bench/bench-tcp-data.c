/* SPDX-License-Identifier: MIT */
/*
 * bench-tcp-data: throughput of the TCP data plane against the plain loopback baseline, in one
 * process. The baseline is one loopback TCP connection with a writer thread calling write() and
 * a reader thread calling read() in 1 MiB pieces between two contiguous buffers (what iperf3
 * measures); the data plane moves the same bytes as scattered blocks between two TcpData ends
 * over N loopback connections. Runs alternate, every destination byte is checked after each
 * data plane run, and the medians are compared (after one untimed warm-up run of each). No
 * thresholds: it reports, it does not judge.
 *
 *   bench-tcp-data [--size MiB] [--block KiB] [--conns N] [--chunk KiB] [--crc] [--runs N]
 */

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/macro.h"
#include "daemon/transport/tcp-data.h"
#include "common/time-util.h"

#define PIECE ((size_t)1 << 20)
#define MAX_RUNS 64

typedef struct Opts {
        size_t size;
        size_t block;
        unsigned conns;
        uint32_t chunk;
        bool crc;
        unsigned runs;
} Opts;

static void die(const char *what, int err)
{
        fprintf(stderr, "bench-tcp-data: %s: %s\n", what, strerror(err));
        exit(EXIT_FAILURE);
}

/* A connected loopback TCP pair with default (autotuned) buffers, blocking. */
static void tcp_pair(int fds[2])
{
        struct sockaddr_in sin = {.sin_family = AF_INET};
        socklen_t len = sizeof(sin);
        int l;

        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (l < 0 || bind(l, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
            getsockname(l, (struct sockaddr *)&sin, &len) < 0 || listen(l, 4) < 0)
                die("listen", errno);
        fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&sin, sizeof(sin)) < 0)
                die("connect", errno);
        fds[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (fds[1] < 0)
                die("accept", errno);
        close(l);
}

/* ---- baseline: write() and read() loops over one connection ---- */

typedef struct Plain {
        int fd;
        uint8_t *buf;
        size_t size;
} Plain;

static void *plain_writer(void *userdata)
{
        Plain *p = userdata;

        for (size_t off = 0; off < p->size;) {
                ssize_t n = write(p->fd, p->buf + off, MIN(PIECE, p->size - off));

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        die("write", errno);
                off += (size_t)n;
        }
        return NULL;
}

static double run_plain(uint8_t *src, uint8_t *dst, size_t size)
{
        Plain w, r;
        pthread_t t;
        usec_t start;
        int fds[2];

        tcp_pair(fds);
        w = (Plain){.fd = fds[0], .buf = src, .size = size};
        r = (Plain){.fd = fds[1], .buf = dst, .size = size};
        start = now_usec(CLOCK_MONOTONIC);
        if (pthread_create(&t, NULL, plain_writer, &w) != 0)
                die("pthread_create", errno);
        for (size_t off = 0; off < size;) {
                ssize_t n = read(r.fd, r.buf + off, MIN(PIECE, size - off));

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        die("read", errno);
                off += (size_t)n;
        }
        pthread_join(t, NULL);
        start = now_usec(CLOCK_MONOTONIC) - start;
        close(fds[0]);
        close(fds[1]);
        if (memcmp(src, dst, size) != 0)
                die("plain loop: bytes differ", EIO);
        return (double)size / (double)start * USEC_PER_SEC / 1e9;
}

/* ---- the data plane ---- */

typedef struct Bench {
        struct event_base *base;
        TcpData *a, *b;
        unsigned done;
        int status;
} Bench;

static void on_done(void *userdata, int status)
{
        Bench *b = userdata;

        b->done++;
        if (status < 0)
                b->status = status;
}

static void on_broken(TcpData *td, int error, void *userdata)
{
        (void)td;
        (void)userdata;
        die("data plane broke", -error);
}

static void bench_init(Bench *b, const Opts *o)
{
        int fa[TCP_DATA_MAX_CONNS], fb[TCP_DATA_MAX_CONNS], r;
        TcpDataOptions to = {
                .n_fds = o->conns,
                .chunk_size = o->chunk,
                .crc = o->crc,
                .broken = on_broken,
        };

        *b = (Bench){.base = event_base_new()};
        if (!b->base)
                die("event_base_new", ENOMEM);
        to.base = b->base;
        for (unsigned i = 0; i < o->conns; i++) {
                int fds[2];

                tcp_pair(fds);
                fa[i] = fds[0];
                fb[i] = fds[1];
        }
        to.fds = fa;
        r = tcp_data_new(&to, &b->a);
        if (r < 0)
                die("tcp_data_new", -r);
        to.fds = fb;
        r = tcp_data_new(&to, &b->b);
        if (r < 0)
                die("tcp_data_new", -r);
}

static double run_data(Bench *b, uint64_t id, const TcpSrcSegment *src, const TcpDstSegment *dst,
                       size_t n, size_t size)
{
        usec_t start;
        int r;

        b->done = 0;
        b->status = 0;
        start = now_usec(CLOCK_MONOTONIC);
        r = tcp_data_recv(b->b, id, dst, n, on_done, b);
        if (r < 0)
                die("tcp_data_recv", -r);
        r = tcp_data_send(b->a, id, src, n, on_done, b);
        if (r < 0)
                die("tcp_data_send", -r);
        while (b->done < 2)
                if (event_base_loop(b->base, EVLOOP_ONCE) < 0)
                        die("event_base_loop", EIO);
        start = now_usec(CLOCK_MONOTONIC) - start;
        if (b->status < 0)
                die("transfer", -b->status);
        return (double)size / (double)start * USEC_PER_SEC / 1e9;
}

static int cmp_double(const void *x, const void *y)
{
        double a = *(const double *)x, b = *(const double *)y;

        return (a > b) - (a < b);
}

static double median(double *v, unsigned n)
{
        qsort(v, n, sizeof(*v), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void parse(int argc, char **argv, Opts *o)
{
        static const struct option longopts[] = {
                {"size", required_argument, NULL, 's'},
                {"block", required_argument, NULL, 'b'},
                {"conns", required_argument, NULL, 'n'},
                {"chunk", required_argument, NULL, 'c'},
                {"crc", no_argument, NULL, 'C'},
                {"runs", required_argument, NULL, 'r'},
                {},
        };
        int c;

        *o = (Opts){.size = 256 << 20, .block = 64 << 10, .conns = 4, .runs = 7};
        while ((c = getopt_long(argc, argv, "", longopts, NULL)) >= 0) {
                switch (c) {
                case 's':
                        o->size = strtoull(optarg, NULL, 10) << 20;
                        break;
                case 'b':
                        o->block = strtoull(optarg, NULL, 10) << 10;
                        break;
                case 'n':
                        o->conns = (unsigned)strtoul(optarg, NULL, 10);
                        break;
                case 'c':
                        o->chunk = (uint32_t)(strtoul(optarg, NULL, 10) << 10);
                        break;
                case 'C':
                        o->crc = true;
                        break;
                case 'r':
                        o->runs = (unsigned)strtoul(optarg, NULL, 10);
                        break;
                default:
                        exit(EXIT_FAILURE);
                }
        }
        if (o->size == 0 || o->block == 0 || o->size % o->block != 0 || o->conns < 1 ||
            o->conns > TCP_DATA_MAX_CONNS || o->runs < 1 || o->runs > MAX_RUNS) {
                fprintf(stderr, "bench-tcp-data: bad arguments\n");
                exit(EXIT_FAILURE);
        }
}

int main(int argc, char **argv)
{
        double plain[MAX_RUNS], data[MAX_RUNS], mp, md;
        _cleanup_free_ uint8_t *src = NULL, *dst = NULL;
        _cleanup_free_ TcpSrcSegment *ss = NULL;
        _cleanup_free_ TcpDstSegment *ds = NULL;
        _cleanup_free_ size_t *perm = NULL;
        uint64_t seed = 1;
        size_t n;
        Bench b;
        Opts o;

        parse(argc, argv, &o);
        n = o.size / o.block;
        src = malloc(o.size);
        dst = malloc(o.size);
        ss = calloc(n, sizeof(*ss));
        ds = calloc(n, sizeof(*ds));
        perm = calloc(n, sizeof(*perm));
        if (!src || !dst || !ss || !ds || !perm)
                die("malloc", ENOMEM);
        for (size_t i = 0; i < o.size; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                src[i] = (uint8_t)(seed >> 56);
        }
        /* Blocks in a shuffled order on both ends, as a paged KV cache has them. */
        for (size_t i = 0; i < n; i++)
                perm[i] = i;
        for (size_t i = n; i > 1; i--) {
                size_t k, t;

                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                k = (size_t)((seed >> 33) % i);
                t = perm[i - 1];
                perm[i - 1] = perm[k];
                perm[k] = t;
        }
        for (size_t i = 0; i < n; i++) {
                ss[i] = (TcpSrcSegment){.src = src + perm[i] * o.block, .len = o.block};
                ds[i] = (TcpDstSegment){.dst = dst + perm[n - 1 - i] * o.block, .len = o.block};
        }

        bench_init(&b, &o);
        /* Fault every page in and warm both paths up before anything is timed. */
        memset(dst, 0, o.size);
        (void)run_plain(src, dst, o.size);
        (void)run_data(&b, UINT64_MAX, ss, ds, n, o.size);
        printf("bench-tcp-data: %zu MiB in %zu blocks of %zu KiB; %u connections, chunk %u KiB, "
               "CRC %s, %u runs\n",
               o.size >> 20, n, o.block >> 10, o.conns,
               (o.chunk ? o.chunk : TCP_STREAM_CHUNK_DEFAULT) >> 10, o.crc ? "on" : "off", o.runs);
        for (unsigned r = 0; r < o.runs; r++) {
                plain[r] = run_plain(src, dst, o.size);
                memset(dst, 0, o.size);
                data[r] = run_data(&b, r + 1, ss, ds, n, o.size);
                for (size_t i = 0; i < n; i++)
                        if (memcmp(ss[i].src, ds[i].dst, o.block) != 0)
                                die("data plane: bytes differ", EIO);
                printf("run %u: plain loop %.2f GB/s, data plane %.2f GB/s\n", r + 1, plain[r],
                       data[r]);
                fflush(stdout);
        }
        mp = median(plain, o.runs);
        md = median(data, o.runs);
        printf("median: plain loop %.2f GB/s, data plane %.2f GB/s, ratio %.2f\n", mp, md, md / mp);

        tcp_data_free(b.a);
        tcp_data_free(b.b);
        event_base_free(b.base);
        return EXIT_SUCCESS;
}
