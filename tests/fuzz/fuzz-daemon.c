/* SPDX-License-Identifier: MIT */
/* Harness of the socket-level fuzz targets: an in-process daemon, its sockets, an idle loop. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>
#include <kvdist/kvdist.h>

#include "daemon/control/conn.h"
#include "daemon/daemon.h"
#include "tests/fuzz/fuzz-daemon.h"
#include "proto/kvdist.pb-c.h"
#include "common/log.h"
#include "daemon/link/peer.h"
#include "common/time-util.h"

/* A loop still busy after this many passes (or this long) spins: a daemon bug. */
#define FUZZ_SETTLE_PASSES_MAX 100000
#define FUZZ_SETTLE_USEC_MAX (10 * USEC_PER_SEC)
/* How often a settle waits 1 ms for work on other threads (copies, data connections). */
#define FUZZ_SETTLE_GRACE_POLLS 5
/* Room the daemon's frames may take beyond its max_frame_size (peer requests add some). */
#define FUZZ_FRAME_SLACK (64u << 10)
/* How long the daemon may take to let go of what closed sockets held. */
#define FUZZ_RELEASE_USEC_MAX (5 * USEC_PER_SEC)
/* Event fds the idle check looks at. */
#define FUZZ_POLL_MAX 1024

static char fuzz_dir[PATH_MAX];
static bool fuzz_trace;

static bool loop_busy(FuzzDaemon *f, int timeout_ms, int *ready);

/* libFuzzer's and the replay driver's programs are linked with --wrap=connect,--wrap=bind. */
int __real_connect(int fd, const struct sockaddr *sa, socklen_t len);
int __wrap_connect(int fd, const struct sockaddr *sa, socklen_t len);
int __real_bind(int fd, const struct sockaddr *sa, socklen_t len);
int __wrap_bind(int fd, const struct sockaddr *sa, socklen_t len);

int __wrap_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
        /* A script may name any address; the daemon under test must reach none of them. */
        if (sa && len >= sizeof(sa_family_t) &&
            (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)) {
                errno = ENETUNREACH;
                return -1;
        }
        return __real_connect(fd, sa, len);
}

int __wrap_bind(int fd, const struct sockaddr *sa, socklen_t len)
{
        struct sockaddr_in in;
        struct sockaddr_in6 in6;

        /* Nor may it take a port a script names, which another program on this host may want:
         * IP listeners get a free loopback port instead (the daemon reports the one it got). */
        if (sa && sa->sa_family == AF_INET && len == sizeof(in)) {
                memcpy(&in, sa, sizeof(in));
                in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                in.sin_port = 0;
                return __real_bind(fd, (const struct sockaddr *)&in, len);
        }
        if (sa && sa->sa_family == AF_INET6 && len == sizeof(in6)) {
                memcpy(&in6, sa, sizeof(in6));
                in6.sin6_addr = in6addr_loopback;
                in6.sin6_port = 0;
                in6.sin6_scope_id = 0;
                return __real_bind(fd, (const struct sockaddr *)&in6, len);
        }
        return __real_bind(fd, sa, len);
}

char *fuzz_private_path(const char *name)
{
        char *p;

        FUZZ_CHECK(asprintf(&p, "%s/%s", fuzz_dir, name) >= 0);
        return p;
}

static void fuzz_cleanup(void)
{
        DIR *d = opendir(fuzz_dir);
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.')
                        (void)unlinkat(dirfd(d), de->d_name, 0);
        closedir(d);
        (void)rmdir(fuzz_dir);
}

void fuzz_init(void)
{
        static bool done;
        const char *tmp = getenv("TMPDIR"), *level = getenv("KVDIST_FUZZ_LOG");
        int l = level ? log_level_from_string(level) : -EINVAL;

        if (done)
                return;
        done = true;
        /* Hostile input makes the daemon warn on every run: only asked-for logs are written. */
        log_set_max_level(l >= 0 ? l : LOG_EMERG);
        fuzz_trace = l >= LOG_DEBUG;
        FUZZ_CHECK(snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/kvdist-fuzz-XXXXXX",
                            tmp && tmp[0] ? tmp : "/tmp") < (int)sizeof(fuzz_dir));
        FUZZ_CHECK(mkdtemp(fuzz_dir));
        FUZZ_CHECK(atexit(fuzz_cleanup) == 0);
        (void)signal(SIGPIPE, SIG_IGN);
}

/* The number of open fds (the directory's own included, the same way every time). */
static unsigned count_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        unsigned n = 0;

        FUZZ_CHECK(d);
        while ((de = readdir(d)))
                n += de->d_name[0] != '.';
        closedir(d);
        return n;
}

static void print_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d))) {
                char path[PATH_MAX], target[PATH_MAX];
                ssize_t n;

                if (de->d_name[0] == '.')
                        continue;
                (void)snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
                n = readlink(path, target, sizeof(target) - 1);
                target[n > 0 ? n : 0] = '\0';
                fprintf(stderr, "  fd %s -> %s\n", de->d_name, target);
        }
        closedir(d);
}

FuzzDaemon *fuzz_daemon_new(const FuzzTarget *target, void (*tweak)(Config *c))
{
        FuzzDaemon *f;
        Config *c;

        f = calloc(1, sizeof(*f));
        FUZZ_CHECK(f);
        f->target = target;
        f->wait_left_ms = FUZZ_WAIT_BUDGET_MS;
        for (size_t i = 0; i < ARRAY_SIZE(f->ep); i++)
                f->ep[i].fd = f->ep[i].daemon_fd = -1;
        f->n_fds = count_fds();

        FUZZ_CHECK(config_new(&c) == 0);
        free(c->socket_path);
        c->socket_path = fuzz_private_path("kvdist.sock");
        c->memory_size = 1u << 20;
        c->copy_threads = 1;
        if (tweak)
                tweak(c);
        FUZZ_CHECK(daemon_new(c, &f->daemon) == 0);
        return f;
}

/*
 * Once every client and peer socket is closed on our side, the daemon must let go of everything
 * they held: a connection, cluster or peer that outlives its process holds memory and limits
 * forever (a dup of a client's own socket passed in a frame kept it alive once).
 */
static void check_released(FuzzDaemon *f)
{
        Daemon *d = f->daemon;
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + FUZZ_RELEASE_USEC_MAX;

        for (size_t i = 0; i < ARRAY_SIZE(f->ep); i++)
                f->ep[i].fd = safe_close(f->ep[i].fd);
        for (;;) {
                fuzz_settle(f);
                if (d->control.counters.conns_open == 0 && d->link.n_clusters == 0 &&
                    d->link.n_peers == 0 && d->link.n_inlinks == 0 && d->link.n_links == 0 &&
                    d->transfer.n_transfers == 0 && d->transfer.n_served == 0)
                        return;
                if (now_usec(CLOCK_MONOTONIC) > deadline)
                        break;
                /* Work on other threads may still have to come back. */
                (void)loop_busy(f, 1, NULL);
        }
        fprintf(stderr,
                "fuzz: with every socket closed on our side the daemon still holds %u "
                "connections, %u clusters, %u peers, %u inbound links, %u links, %u transfers, "
                "%u served transfers\n",
                d->control.counters.conns_open, d->link.n_clusters, d->link.n_peers,
                d->link.n_inlinks, d->link.n_links, d->transfer.n_transfers, d->transfer.n_served);
        abort();
}

void fuzz_daemon_free(FuzzDaemon *f)
{
        unsigned n;

        check_released(f);
        f->daemon = daemon_free(f->daemon);
        for (size_t i = 0; i < ARRAY_SIZE(f->ep); i++) {
                safe_close(f->ep[i].fd);
                free(f->ep[i].buf);
        }
        if (f->wanted)
                protobuf_c_message_free_unpacked(f->wanted, NULL);
        n = count_fds();
        if (n != f->n_fds) {
                fprintf(stderr, "fuzz: %u fds open before the daemon, %u after it was freed:\n",
                        f->n_fds, n);
                print_fds();
                abort();
        }
        free(f);
}

static FuzzEndpoint *endpoint_init(FuzzDaemon *f, unsigned i, bool frames)
{
        FuzzEndpoint *ep = &f->ep[i];
        struct stat st;
        int sv[2];

        FUZZ_CHECK(i < ARRAY_SIZE(f->ep) && !ep->opened);
        FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
        FUZZ_CHECK(fstat(sv[1], &st) == 0);
        ep->fd = sv[0];
        ep->daemon_fd = sv[1];
        ep->daemon_ino = st.st_ino;
        ep->opened = true;
        ep->frames = frames;
        return ep;
}

void fuzz_endpoint_client(FuzzDaemon *f, unsigned i)
{
        FuzzEndpoint *ep = endpoint_init(f, i, true);
        struct ucred cred;
        socklen_t len = sizeof(cred);
        Conn *c;

        FUZZ_CHECK(getsockopt(ep->daemon_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0);
        FUZZ_CHECK(conn_new(&f->daemon->control, ep->daemon_fd, &cred, NULL, false, &c) == 0);
}

void fuzz_endpoint_peer(FuzzDaemon *f, unsigned i, bool frames)
{
        FuzzEndpoint *ep = endpoint_init(f, i, frames);

        FUZZ_CHECK(peer_accept(&f->daemon->link, ep->daemon_fd, NULL, 0) == 0);
}

unsigned fuzz_endpoint_free_slot(FuzzDaemon *f, unsigned from)
{
        for (unsigned i = from; i < ARRAY_SIZE(f->ep); i++)
                if (!f->ep[i].opened)
                        return i;
        FUZZ_CHECK(!"no endpoint slot left");
        return 0;
}

/* ---- what the daemon sends ---- */

/* Checks one frame the daemon sent and decodes it (an error frame as a bare Status). */
static ProtobufCMessage *frame_check(const FrameHeader *h, const uint8_t *payload)
{
        const FrameType *ft = frame_type_lookup(h->type);
        const ProtobufCMessageDescriptor *desc;
        const Kvdist__V1__Status *st = NULL;
        ProtobufCMessage *msg = NULL;

        if (h->flags & FRAME_FLAG_ERROR) {
                FUZZ_CHECK(h->flags & FRAME_FLAG_REPLY);
                desc = &kvdist__v1__status__descriptor;
        } else {
                /* Only an error answers a type the daemon does not know. */
                FUZZ_CHECK(ft);
                desc = (h->flags & FRAME_FLAG_REPLY) ? ft->reply : ft->request;
        }
        FUZZ_CHECK(frame_unpack(desc, payload, h->length, &msg) == 0);
        if (h->flags & FRAME_FLAG_ERROR)
                st = (const Kvdist__V1__Status *)msg;
        else if (h->flags & FRAME_FLAG_REPLY)
                st = *(Kvdist__V1__Status *const *)((const uint8_t *)msg + desc->fields[0].offset);
        if (h->flags & FRAME_FLAG_REPLY) {
                /* Every answer says how it went, with a status of the public header. */
                FUZZ_CHECK(st);
                FUZZ_CHECK(st->code <= 0 && st->code >= _KVD_E_MIN);
                FUZZ_CHECK(!(h->flags & FRAME_FLAG_ERROR) || st->code < 0);
        }
        return msg;
}

/* Takes every whole frame out of endpoint @i's buffer. */
static void endpoint_parse(FuzzDaemon *f, unsigned i)
{
        FuzzEndpoint *ep = &f->ep[i];
        uint32_t max = f->daemon->config->limits.max_frame_size + FUZZ_FRAME_SLACK;
        size_t off = 0;

        while (ep->len - off >= FRAME_HEADER_SIZE) {
                ProtobufCMessage *msg;
                FrameHeader h;

                FUZZ_CHECK(frame_header_decode(ep->buf + off, max, &h) == 0);
                if (ep->len - off - FRAME_HEADER_SIZE < h.length)
                        break;
                msg = frame_check(&h, ep->buf + off + FRAME_HEADER_SIZE);
                off += FRAME_HEADER_SIZE + h.length;
                if (fuzz_trace)
                        fprintf(stderr, "fuzz: endpoint %u: got %s%s %u id %" PRIu64 "\n", i,
                                (h.flags & FRAME_FLAG_ERROR) ? "error " : "",
                                (h.flags & FRAME_FLAG_REPLY) ? "reply" : "request", h.type,
                                h.request_id);
                if (f->target->on_frame)
                        f->target->on_frame(f, i, &h, msg);
                if (f->want && !f->wanted_done && f->want_ep == i && h.type == f->want_type &&
                    (h.flags & FRAME_FLAG_REPLY)) {
                        f->wanted_done = true;
                        if (!(h.flags & FRAME_FLAG_ERROR))
                                f->wanted = TAKE_PTR(msg);
                }
                if (msg)
                        protobuf_c_message_free_unpacked(msg, NULL);
        }
        memmove(ep->buf, ep->buf + off, ep->len - off);
        ep->len -= off;
}

/* Reads what the daemon sent on endpoint @i; our end closes when the daemon's did. */
static void endpoint_drain(FuzzDaemon *f, unsigned i)
{
        FuzzEndpoint *ep = &f->ep[i];
        static uint8_t tmp[1u << 16];

        while (ep->fd >= 0 && !ep->no_read && !ep->paused) {
                int fds[FRAME_MAX_FDS];
                size_t n_fds = 0;
                ssize_t n;

                /* The daemon passes one fd a frame at most; more (-EPROTO) is a bug. */
                n = frame_recvmsg(ep->fd, tmp, sizeof(tmp), fds, ARRAY_SIZE(fds), &n_fds);
                if (n == -EAGAIN || n == -EINTR)
                        return;
                for (size_t k = 0; k < n_fds; k++)
                        safe_close(fds[k]);
                if (n <= 0) {
                        FUZZ_CHECK(n == 0 || n == -ECONNRESET);
                        ep->fd = safe_close(ep->fd);
                        return;
                }
                if (!ep->frames)
                        continue;
                if (ep->len + (size_t)n > ep->cap) {
                        size_t cap = MAX(ep->cap * 2, ep->len + (size_t)n);

                        ep->buf = realloc(ep->buf, cap);
                        FUZZ_CHECK(ep->buf);
                        ep->cap = cap;
                }
                memcpy(ep->buf + ep->len, tmp, (size_t)n);
                ep->len += (size_t)n;
                endpoint_parse(f, i);
        }
}

static void drain_all(FuzzDaemon *f)
{
        for (unsigned i = 0; i < ARRAY_SIZE(f->ep); i++)
                endpoint_drain(f, i);
}

/* ---- the event loop ---- */

typedef struct LoopScan {
        const struct event *events[FUZZ_POLL_MAX];
        size_t n_events;
        struct pollfd fds[FUZZ_POLL_MAX];
        nfds_t n_fds;
} LoopScan;

/* Runs under the base's lock, which event_pending() would take again: it only collects. */
static int loop_collect_event(const struct event_base *base, const struct event *ev, void *userdata)
{
        LoopScan *s = userdata;

        FUZZ_CHECK(s->n_events < ARRAY_SIZE(s->events));
        s->events[s->n_events++] = ev;
        return 0;
}

/*
 * Whether a pass of the loop would run a callback: an active event, a timer that is due, or an
 * fd ready for what its event waits for (within @timeout_ms). @ready, when not NULL, gets the
 * first ready fd (-1 for a timer or an active event).
 */
static bool loop_busy(FuzzDaemon *f, int timeout_ms, int *ready)
{
        /* Only the loop's thread runs this; too big for the stack of a fuzzer's thread. */
        static LoopScan scan;
        struct event_base *base = f->daemon->base;
        LoopScan *s = &scan;
        struct timeval now;
        bool busy = false;
        int n;

        if (ready)
                *ready = -1;
        if (event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE) > 0)
                return true;
        s->n_events = 0;
        s->n_fds = 0;
        FUZZ_CHECK(event_base_foreach_event(base, loop_collect_event, s) == 0);
        FUZZ_CHECK(evutil_gettimeofday(&now, NULL) == 0);
        for (size_t k = 0; k < s->n_events && !busy; k++) {
                const struct event *ev = s->events[k];
                evutil_socket_t fd = event_get_fd(ev);
                struct timeval tv;
                short what;

                what = event_pending(ev, EV_READ | EV_WRITE | EV_TIMEOUT | EV_SIGNAL, &tv);
                if ((what & EV_TIMEOUT) && !evutil_timercmp(&tv, &now, >))
                        busy = true;
                if ((what & (EV_READ | EV_WRITE)) && !(what & EV_SIGNAL) && fd >= 0)
                        s->fds[s->n_fds++] = (struct pollfd){
                                .fd = fd,
                                .events = (short)(((what & EV_READ) ? POLLIN : 0) |
                                                  ((what & EV_WRITE) ? POLLOUT : 0)),
                        };
        }
        if (!busy) {
                n = poll(s->fds, s->n_fds, timeout_ms);
                FUZZ_CHECK(n >= 0 || errno == EINTR);
                for (nfds_t k = 0; n > 0 && k < s->n_fds && !busy; k++)
                        /* An event on a closed fd never fires: not a reason to run the loop. */
                        if (s->fds[k].revents && !(s->fds[k].revents & POLLNVAL)) {
                                busy = true;
                                if (ready)
                                        *ready = s->fds[k].fd;
                        }
        }
        return busy;
}

static void loop_report_spin(FuzzDaemon *f, unsigned passes)
{
        int fd;

        (void)loop_busy(f, 0, &fd);
        fprintf(stderr, "fuzz: the event loop is still busy after %u passes (ready: %s%d)\n",
                passes, fd >= 0 ? "fd " : "a timer or an active event ", fd);
        print_fds();
        abort();
}

void fuzz_settle(FuzzDaemon *f)
{
        Daemon *d = f->daemon;
        usec_t start = now_usec(CLOCK_MONOTONIC);
        unsigned grace = 0;

        for (unsigned pass = 0;; pass++) {
                drain_all(f);
                FUZZ_CHECK(event_base_loop(d->base, EVLOOP_NONBLOCK) >= 0);
                drain_all(f);
                if (loop_busy(f, 0, NULL)) {
                        if (pass >= FUZZ_SETTLE_PASSES_MAX ||
                            now_usec(CLOCK_MONOTONIC) - start > FUZZ_SETTLE_USEC_MAX)
                                loop_report_spin(f, pass);
                        continue;
                }
                /* Copies and data connections run on threads and report through eventfds. */
                if ((d->transfer.n_transfers > 0 || d->transfer.n_served > 0) &&
                    grace++ < FUZZ_SETTLE_GRACE_POLLS && loop_busy(f, 1, NULL))
                        continue;
                return;
        }
}

static void loop_noop(evutil_socket_t fd, short what, void *userdata)
{
}

/* Runs the loop for @ms milliseconds, reading what the daemon sends meanwhile. */
static void fuzz_wait(FuzzDaemon *f, unsigned ms)
{
        usec_t end = now_usec(CLOCK_MONOTONIC) + ms * USEC_PER_MSEC;

        for (;;) {
                static const struct timeval tick = {0, 1000};
                usec_t now = now_usec(CLOCK_MONOTONIC);

                if (now >= end)
                        break;
                drain_all(f);
                /* EVLOOP_ONCE blocks until something runs: the tick bounds the wait. */
                FUZZ_CHECK(event_base_once(f->daemon->base, -1, EV_TIMEOUT, loop_noop, NULL,
                                           &tick) == 0);
                FUZZ_CHECK(event_base_loop(f->daemon->base, EVLOOP_ONCE) >= 0);
        }
        fuzz_settle(f);
}

/* ---- what we send ---- */

static int memfd_make(size_t size, unsigned seals)
{
        int fd = memfd_create("kvdist-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        FUZZ_CHECK(fd >= 0);
        FUZZ_CHECK(ftruncate(fd, (off_t)size) == 0);
        if (seals)
                FUZZ_CHECK(fcntl(fd, F_ADD_SEALS, seals) == 0);
        return fd;
}

/* A new fd of @kind to pass on endpoint @ep. */
static int fd_make(FuzzEndpoint *ep, FuzzFdKind kind)
{
        struct stat st;
        int fd, sv[2];

        switch (kind) {
        case FUZZ_FD_MEMFD:
                return memfd_make(FUZZ_MEMFD_SIZE, F_SEAL_SHRINK);
        case FUZZ_FD_MEMFD_UNSEALED:
                return memfd_make(FUZZ_MEMFD_SIZE, 0);
        case FUZZ_FD_MEMFD_EMPTY:
                return memfd_make(0, F_SEAL_SHRINK);
        case FUZZ_FD_MEMFD_SEALED_WRITE:
                return memfd_make(FUZZ_MEMFD_SIZE, F_SEAL_SHRINK | F_SEAL_WRITE);
        case FUZZ_FD_MEMFD_SPARSE:
                return memfd_make(64u << 20, F_SEAL_SHRINK);
        case FUZZ_FD_OWN_SOCKET:
                fd = fcntl(ep->fd, F_DUPFD_CLOEXEC, 3);
                FUZZ_CHECK(fd >= 0);
                return fd;
        case FUZZ_FD_DAEMON_SOCKET:
                /* Only while that number still names the daemon's end of this connection. */
                if (fstat(ep->daemon_fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
                    st.st_ino == ep->daemon_ino) {
                        fd = fcntl(ep->daemon_fd, F_DUPFD_CLOEXEC, 3);
                        FUZZ_CHECK(fd >= 0);
                        return fd;
                }
                return fd_make(ep, FUZZ_FD_DEV_NULL);
        case FUZZ_FD_PIPE:
                FUZZ_CHECK(pipe2(sv, O_CLOEXEC) == 0);
                safe_close(sv[1]);
                return sv[0];
        case FUZZ_FD_DEV_NULL:
                fd = open("/dev/null", O_RDWR | O_CLOEXEC);
                FUZZ_CHECK(fd >= 0);
                return fd;
        case FUZZ_FD_EVENTFD:
                fd = eventfd(0, EFD_CLOEXEC);
                FUZZ_CHECK(fd >= 0);
                return fd;
        case FUZZ_FD_DIRECTORY:
                fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
                FUZZ_CHECK(fd >= 0);
                return fd;
        case FUZZ_FD_SOCKETPAIR:
                FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
                safe_close(sv[1]);
                return sv[0];
        default:
                FUZZ_CHECK(!"unknown fd kind");
                return -1;
        }
}

/*
 * Sends @len bytes on endpoint @i with @n_fds fds of kind byte @kind (see fuzz-script.h) riding
 * on the first byte; settles while the socket is full, and gives up on a broken one.
 */
static void endpoint_send(FuzzDaemon *f, unsigned i, const uint8_t *buf, size_t len, uint8_t kind,
                          unsigned n_fds)
{
        FuzzEndpoint *ep = &f->ep[i];
        int fds[8];
        unsigned full = 0;
        size_t off = 0;

        FUZZ_CHECK(n_fds <= ARRAY_SIZE(fds));
        if (ep->fd < 0 || len == 0)
                return;
        for (unsigned k = 0; k < n_fds; k++)
                fds[k] = fd_make(ep, kind < 16 ? (FuzzFdKind)(kind % _FUZZ_FD_MAX)
                                               : (FuzzFdKind)(((kind & 15) + k) % _FUZZ_FD_MAX));
        while (off < len && ep->fd >= 0) {
                union {
                        struct cmsghdr h;
                        char buf[CMSG_SPACE(sizeof(fds))];
                } control;
                struct iovec iov = {(void *)(buf + off), len - off};
                struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
                ssize_t n;

                if (off == 0 && n_fds > 0) {
                        memset(&control, 0, sizeof(control));
                        mh.msg_control = &control;
                        mh.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
                        control.h.cmsg_level = SOL_SOCKET;
                        control.h.cmsg_type = SCM_RIGHTS;
                        control.h.cmsg_len = CMSG_LEN(n_fds * sizeof(int));
                        memcpy(CMSG_DATA(&control.h), fds, n_fds * sizeof(int));
                }
                n = sendmsg(ep->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EAGAIN && full++ < 64) {
                        /* The daemon reads a bounded amount per wake-up; let it. */
                        fuzz_settle(f);
                        continue;
                }
                if (n < 0)
                        break;
                off += (size_t)n;
        }
        for (unsigned k = 0; k < n_fds; k++)
                safe_close(fds[k]);
}

bool fuzz_send_request(FuzzDaemon *f, unsigned i, uint16_t type, uint64_t id,
                       const ProtobufCMessage *msg, int fd)
{
        FuzzEndpoint *ep = &f->ep[i];
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;
        ssize_t n;

        FUZZ_CHECK(frame_pack(type, 0, id, fd >= 0 ? 1 : 0, msg, UINT32_MAX, &buf, &len) == 0);
        if (ep->fd < 0)
                return false;
        /* Small frames into a socket we keep drained: one sendmsg takes them whole. */
        n = frame_sendmsg(ep->fd, buf, len, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0);
        return n == (ssize_t)len;
}

ProtobufCMessage *fuzz_expect_reply(FuzzDaemon *f, unsigned i, uint16_t type)
{
        f->want = true;
        f->wanted_done = false;
        f->want_ep = i;
        f->want_type = type;
        fuzz_settle(f);
        f->want = false;
        return TAKE_PTR(f->wanted);
}

bool fuzz_request_ok(FuzzDaemon *f, unsigned i, uint16_t type, uint64_t id,
                     const ProtobufCMessage *msg, int fd)
{
        ProtobufCMessage *reply;
        bool ok;

        if (!fuzz_send_request(f, i, type, id, msg, fd))
                return false;
        reply = fuzz_expect_reply(f, i, type);
        ok = fuzz_reply_ok(reply);
        if (reply)
                protobuf_c_message_free_unpacked(reply, NULL);
        return ok;
}

bool fuzz_reply_ok(const ProtobufCMessage *reply)
{
        const Kvdist__V1__Status *st;

        if (!reply)
                return false;
        st = *(Kvdist__V1__Status *const *)((const uint8_t *)reply +
                                            reply->descriptor->fields[0].offset);
        return st && st->code == KVD_OK;
}

void fuzz_send_raw(FuzzDaemon *f, unsigned i, const void *buf, size_t len)
{
        endpoint_send(f, i, buf, len, 0, 0);
}

/* ---- scripts ---- */

/* Reads @n (at most 8) little-endian bytes into *@ret. */
static bool fuzz_le(const uint8_t **data, size_t *size, size_t n, uint64_t *ret)
{
        uint64_t v = 0;

        if (*size < n)
                return false;
        for (size_t k = 0; k < n; k++)
                v |= (uint64_t)(*data)[k] << (8 * k);
        *data += n;
        *size -= n;
        *ret = v;
        return true;
}

bool fuzz_u8(const uint8_t **data, size_t *size, uint8_t *ret)
{
        uint64_t v;

        if (!fuzz_le(data, size, 1, &v))
                return false;
        *ret = (uint8_t)v;
        return true;
}

bool fuzz_u16(const uint8_t **data, size_t *size, uint16_t *ret)
{
        uint64_t v;

        if (!fuzz_le(data, size, 2, &v))
                return false;
        *ret = (uint16_t)v;
        return true;
}

bool fuzz_u32(const uint8_t **data, size_t *size, uint32_t *ret)
{
        uint64_t v;

        if (!fuzz_le(data, size, 4, &v))
                return false;
        *ret = (uint32_t)v;
        return true;
}

bool fuzz_u64(const uint8_t **data, size_t *size, uint64_t *ret)
{
        return fuzz_le(data, size, 8, ret);
}

/* FUZZ_OP_FRAME; false when the record is cut short. */
static bool script_frame(FuzzDaemon *f, uint8_t arg, const uint8_t **data, size_t *size)
{
        const FrameType *ft;
        ProtobufCMessage *msg = NULL;
        _cleanup_free_ uint8_t *packed = NULL, *buf = NULL;
        const uint8_t *payload;
        uint8_t flags, id, kind, cut = 0;
        uint16_t type, len;
        size_t plen, total;
        FrameHeader h;

        if (!fuzz_u16(data, size, &type) || !fuzz_u8(data, size, &flags) ||
            !fuzz_u8(data, size, &id) || !fuzz_u8(data, size, &kind) ||
            ((arg & 8) && !fuzz_u8(data, size, &cut)) || !fuzz_u16(data, size, &len) || *size < len)
                return false;
        payload = *data;
        plen = len;
        *data += len;
        *size -= len;

        /* Ids the daemon handed out: a script cannot know them, the target can fill them in. */
        ft = frame_type_lookup(type);
        if (f->target->fixup && ft && !(flags & FRAME_FLAG_REPLY) &&
            frame_unpack(ft->request, payload, plen, &msg) == 0) {
                if (f->target->fixup(f, type, msg)) {
                        plen = protobuf_c_message_get_packed_size(msg);
                        packed = malloc(plen ?: 1);
                        FUZZ_CHECK(packed);
                        FUZZ_CHECK(protobuf_c_message_pack(msg, packed) == plen);
                        payload = packed;
                }
                protobuf_c_message_free_unpacked(msg, NULL);
        }

        h = (FrameHeader){
                .magic = FRAME_MAGIC,
                .version = FRAME_VERSION,
                .type = type,
                .flags = flags,
                .n_fds = arg & 7,
                .length = (uint32_t)plen,
                .request_id = id,
        };
        total = FRAME_HEADER_SIZE + plen;
        buf = malloc(total);
        FUZZ_CHECK(buf);
        frame_header_encode(&h, buf);
        memcpy(buf + FRAME_HEADER_SIZE, payload, plen);
        endpoint_send(f, f->cur, buf, (arg & 8) ? MIN((size_t)cut, total) : total, kind, arg & 7);
        return true;
}

/* FUZZ_OP_RAW; false when the record is cut short. */
static bool script_raw(FuzzDaemon *f, uint8_t arg, const uint8_t **data, size_t *size)
{
        uint8_t kind;
        uint16_t len;

        if (!fuzz_u8(data, size, &kind) || !fuzz_u16(data, size, &len) || *size < len)
                return false;
        endpoint_send(f, f->cur, *data, len, kind, arg & 7);
        *data += len;
        *size -= len;
        return true;
}

void fuzz_run_script(FuzzDaemon *f, const uint8_t *data, size_t size)
{
        uint8_t op;

        while (fuzz_u8(&data, &size, &op)) {
                FuzzEndpoint *ep = &f->ep[f->cur];
                uint8_t arg = op >> 4, mode;
                unsigned i, ms;
                size_t n;

                switch ((op & 15) % _FUZZ_OP_MAX) {
                case FUZZ_OP_FRAME:
                        if (!script_frame(f, arg, &data, &size))
                                return;
                        break;
                case FUZZ_OP_RAW:
                        if (!script_raw(f, arg, &data, &size))
                                return;
                        break;
                case FUZZ_OP_SHUT_RD:
                        if (ep->fd >= 0) {
                                (void)shutdown(ep->fd, SHUT_RD);
                                ep->no_read = true;
                        }
                        break;
                case FUZZ_OP_SHUT_WR:
                        if (ep->fd >= 0)
                                (void)shutdown(ep->fd, SHUT_WR);
                        break;
                case FUZZ_OP_CLOSE:
                        ep->fd = safe_close(ep->fd);
                        break;
                case FUZZ_OP_ENDPOINT:
                        i = arg % FUZZ_MAX_ENDPOINTS;
                        if (!f->ep[i].opened) {
                                if (!fuzz_u8(&data, &size, &mode))
                                        return;
                                f->target->open_endpoint(f, i, mode);
                        }
                        f->cur = i;
                        break;
                case FUZZ_OP_WAIT:
                        ms = MIN(arg + 1u, f->wait_left_ms);
                        f->wait_left_ms -= ms;
                        if (ms > 0)
                                fuzz_wait(f, ms);
                        break;
                case FUZZ_OP_PAUSE:
                        ep->paused = !ep->paused;
                        break;
                case FUZZ_OP_CHUNK:
                        if (!f->target->chunk)
                                break;
                        n = f->target->chunk(f, arg, data, size);
                        if (n == 0)
                                return;
                        data += n;
                        size -= n;
                        break;
                }
                fuzz_settle(f);
        }
}
