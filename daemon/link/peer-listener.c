/* SPDX-License-Identifier: MIT */
/* Peer listener and dialing: where peers come from, the key they must hold, shutting them down. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>
#include "common/sockaddr-util.h"
#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "common/log.h"
#include "daemon/link/peer-internal.h"
#include "daemon/link/peer.h"
#include "common/status.h"
#include "daemon/transport/transport-set.h"

#define PEER_KEY_MAX (64u << 10)
#define PEER_KEY_MIN 16

struct PeerListener {
        LinkRoot *root;
        int fd;
        struct event *ev;
        struct sockaddr_storage sa; /* as bound: the real port when asked for port 0 */
        char address[SOCKADDR_STR_MAX];
};

/* The READY connection to node @node_id that takes new links, or NULL. */
static Peer *peer_find_node(LinkRoot *root, uint64_t node_id)
{
        Peer *p;

        CLIST_FOREACH (p, &root->peers, link_daemon)
                if (p->state == PEER_READY && !p->retiring && p->node_id == node_id)
                        return p;
        return NULL;
}

int peer_get(LinkRoot *root, const char *address, Peer **ret, Error *err)
{
        char canon[SOCKADDR_STR_MAX];
        struct sockaddr_storage sa;
        socklen_t len;
        Peer *p;
        int fd, r;

        if (sockaddr_parse(address, 0, &sa, &len) < 0 ||
            sockaddr_format((struct sockaddr *)&sa, len, canon, sizeof(canon)) < 0)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "remote_ip_info \"%.64s\" is not ip:port or [ipv6]:port", address);
        CLIST_FOREACH (p, &root->peers, link_daemon) {
                Peer *use = p;

                if (p->state == PEER_CLOSED || strcmp(p->address, canon) != 0)
                        continue;
                /* A daemon reachable at several addresses (its own, its clusters') is reached
                 * through the connection that takes its new links, whichever address that one
                 * was dialed at: no new connection for each address. */
                if (p->retiring)
                        use = peer_find_node(root, p->node_id);
                if (use) {
                        *ret = use;
                        return 0;
                }
        }
        if (root->stopping)
                return error_set(err, STATUS_DAEMON_UNAVAILABLE, "kvdistd is stopping");
        if (root->n_peers >= root->options.limits->max_peers)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "%u peer connections open (limits.max_peers)", root->n_peers);

        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return error_set(err, STATUS_LINK_FAILED, "cannot open a socket: %s",
                                 strerror(errno));
        sockaddr_socket_setup(fd);
        if (connect(fd, (struct sockaddr *)&sa, len) < 0 && errno != EINPROGRESS) {
                r = errno;
                safe_close(fd);
                return error_set(err, STATUS_LINK_FAILED, "cannot connect to %s: %s", canon,
                                 strerror(r));
        }
        p = peer_new(root, fd, true);
        if (!p || !p->ev_read || !p->ev_write || !p->timer || event_add(p->ev_write, NULL) < 0 ||
            peer_arm_timer(p, PEER_HANDSHAKE_TIMEOUT_MS) < 0) {
                if (p)
                        peer_free(p);
                else
                        safe_close(fd);
                return error_set(err, STATUS_OUT_OF_MEMORY, "cannot set up a peer connection");
        }
        memcpy(&p->sa, &sa, len);
        p->sa_len = len;
        strcpy(p->address, canon);
        strcpy(p->remote, canon);
        log_info("%s: dialing", PEER_NAME(p));
        *ret = p;
        return 0;
}

int peer_accept(LinkRoot *root, int fd, const struct sockaddr *sa, socklen_t len)
{
        Peer *p;

        sockaddr_socket_setup(fd);
        p = peer_new(root, fd, false);
        if (!p || !p->ev_read || !p->ev_write || !p->timer || event_add(p->ev_read, NULL) < 0 ||
            peer_arm_timer(p, PEER_HANDSHAKE_TIMEOUT_MS) < 0) {
                if (p)
                        peer_free(p);
                else
                        safe_close(fd);
                return -ENOMEM;
        }
        if (sa)
                (void)sockaddr_format(sa, len, p->remote, sizeof(p->remote));
        log_debug("%s: accepted", PEER_NAME(p));
        return 0;
}

static void peer_listener_on_accept(evutil_socket_t lfd, short what, void *userdata)
{
        PeerListener *l = userdata;
        LinkRoot *root = l->root;

        for (int n = 0; n < 16; n++) {
                struct sockaddr_storage sa;
                socklen_t len = sizeof(sa);
                int fd, r;

                fd = accept4(lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                                log_warning_errno(-errno,
                                                  "peer listener %s: accept failed, "
                                                  "ignoring",
                                                  l->address);
                        return;
                }
                /* Data connections count too: a peer uses up to 17 sockets. */
                if (root->stopping ||
                    root->n_peers >= root->options.limits->max_peers * (TRANSPORT_MAX_CONNS + 1)) {
                        root->counters.peers_refused++;
                        safe_close(fd);
                        continue;
                }
                r = peer_accept(root, fd, (struct sockaddr *)&sa, len);
                if (r < 0)
                        log_warning_errno(r,
                                          "peer listener %s: cannot set up a connection, "
                                          "ignoring",
                                          l->address);
        }
}

int peer_listener_open(LinkRoot *root, const char *address, PeerListener **ret)
{
        _cleanup_close_ int fd = -1;
        struct sockaddr_storage sa;
        socklen_t len;
        PeerListener *l;
        int one = 1, r;

        r = sockaddr_parse_listen(address, &sa, &len);
        if (r < 0)
                return -EINVAL;
        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, SOMAXCONN) < 0)
                return -errno;
        len = sizeof(sa);
        if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
                return -errno;

        l = calloc(1, sizeof(*l));
        if (!l)
                return -ENOMEM;
        l->root = root;
        memcpy(&l->sa, &sa, len);
        (void)sockaddr_format((struct sockaddr *)&sa, len, l->address, sizeof(l->address));
        l->ev = event_new(root->base, fd, EV_READ | EV_PERSIST, peer_listener_on_accept, l);
        if (!l->ev || event_add(l->ev, NULL) < 0) {
                if (l->ev)
                        event_free(l->ev);
                free(l);
                return -ENOMEM;
        }
        l->fd = TAKE_FD(fd);
        *ret = l;
        return 0;
}

int peer_listener_new(LinkRoot *root, PeerListener **ret)
{
        const char *address = root->options.listen_ip_info;
        int r;

        *ret = NULL;
        if (!address)
                return 0;
        r = peer_listener_open(root, address, ret);
        if (r == -EINVAL)
                return log_error_errno(r, "listen_ip_info %s is not an address", address);
        if (r < 0)
                return log_error_errno(r, "cannot listen for peers on %s", address);
        return 0;
}

int peer_device_listeners_new(LinkRoot *root)
{
        const TransportSet *ts = root->transports;
        int r;

        if (!ts)
                return 0;
        for (size_t i = 0; i < ts->n_devices; i++) {
                const DeviceConfig *d = &ts->devices[i];
                PeerListener *l = NULL;

                if (!d->address)
                        continue;
                if (!root->peer_listener) {
                        log_error("devices: device %" PRIi32 " has the address %s, but this "
                                  "kvdistd does not accept peers: set listen_ip_info too",
                                  d->device_id, d->address);
                        return -EINVAL;
                }
                if (link_root_listens_at(root, d->address)) {
                        log_info("device %" PRIi32 ": reachable at %s (a listener of this "
                                 "kvdistd serves it already)",
                                 d->device_id, d->address);
                        continue;
                }
                if (!root->device_listeners) {
                        root->device_listeners = calloc(ts->n_devices, sizeof(PeerListener *));
                        if (!root->device_listeners)
                                return -ENOMEM;
                }
                r = peer_listener_open(root, d->address, &l);
                if (r < 0)
                        return log_error_errno(r,
                                               "devices: device %" PRIi32 ": cannot listen for "
                                               "peers on its address %s%s",
                                               d->device_id, d->address,
                                               r == -EADDRNOTAVAIL ? " (no interface of this "
                                                                     "host has that address)"
                                               : r == -EADDRINUSE  ? " (another socket holds "
                                                                     "that port)"
                                                                   : "");
                root->device_listeners[root->n_device_listeners++] = l;
                log_info("device %" PRIi32 ": reachable at %s", d->device_id,
                         peer_listener_address(l));
        }
        return 0;
}

/* Whether @a is an unspecified address (0.0.0.0, ::), which a listener binds to every address. */
static bool sockaddr_is_any(const struct sockaddr_storage *a)
{
        if (a->ss_family == AF_INET)
                return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
        return a->ss_family == AF_INET6 &&
               IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

static uint16_t sockaddr_port(const struct sockaddr_storage *a)
{
        return ntohs(a->ss_family == AF_INET ? ((const struct sockaddr_in *)a)->sin_port
                                             : ((const struct sockaddr_in6 *)a)->sin6_port);
}

bool peer_listener_covers(const PeerListener *l, const char *address)
{
        const struct sockaddr_in6 *x, *y;
        struct sockaddr_storage sa;
        socklen_t len;

        if (!l || sockaddr_parse_listen(address, &sa, &len) < 0)
                return false;
        if (sockaddr_port(&sa) == 0 || sockaddr_port(&sa) != sockaddr_port(&l->sa))
                return false;
        /* [::] takes IPv4 connections too (unless net.ipv6.bindv6only is set). */
        if (sockaddr_is_any(&l->sa) &&
            (sa.ss_family == l->sa.ss_family || l->sa.ss_family == AF_INET6))
                return true;
        if (sa.ss_family != l->sa.ss_family)
                return false;
        if (sa.ss_family == AF_INET)
                return ((struct sockaddr_in *)&sa)->sin_addr.s_addr ==
                       ((const struct sockaddr_in *)&l->sa)->sin_addr.s_addr;
        x = (const struct sockaddr_in6 *)&sa;
        y = (const struct sockaddr_in6 *)&l->sa;
        return IN6_ARE_ADDR_EQUAL(&x->sin6_addr, &y->sin6_addr) &&
               x->sin6_scope_id == y->sin6_scope_id;
}

PeerListener *peer_listener_free(PeerListener *l)
{
        if (!l)
                return NULL;
        event_free(l->ev);
        safe_close(l->fd);
        free(l);
        return NULL;
}

const char *peer_listener_address(const PeerListener *l)
{
        return l ? l->address : "";
}

void peer_close_all(LinkRoot *root)
{
        Cluster *c;
        Peer *p, *tmp;

        root->peer_listener = peer_listener_free(root->peer_listener);
        for (size_t i = 0; i < root->n_device_listeners; i++)
                peer_listener_free(root->device_listeners[i]);
        free(root->device_listeners);
        root->device_listeners = NULL;
        root->n_device_listeners = 0;
        CLIST_FOREACH (c, &root->clusters, link_daemon)
                c->listener = peer_listener_free(c->listener);
        CLIST_FOREACH_SAFE (p, tmp, &root->peers, link_daemon)
                peer_lose(p, STATUS_DAEMON_UNAVAILABLE, "kvdistd is stopping");
}

void peer_free_all(LinkRoot *root)
{
        Peer *p, *tmp;

        CLIST_FOREACH_SAFE (p, tmp, &root->peers, link_daemon)
                peer_on_free_later(-1, 0, p);
}

int peer_load_cluster_key(LinkRoot *root)
{
        const char *path = root->options.cluster_key_file;
        _cleanup_close_ int fd = -1;
        _cleanup_free_ uint8_t *key = NULL;
        struct stat st;
        size_t len = 0;

        if (!path) {
                if (root->options.listen_ip_info)
                        log_warning("no cluster_key_file: any host that reaches %s can act as "
                                    "a peer daemon",
                                    root->options.listen_ip_info);
                return 0;
        }
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return log_error_errno(-errno, "cluster_key_file %s", path);
        if (fstat(fd, &st) < 0)
                return log_error_errno(-errno, "cluster_key_file %s", path);
        if (!S_ISREG(st.st_mode) || st.st_size > (off_t)PEER_KEY_MAX)
                return log_error_errno(-EINVAL,
                                       "cluster_key_file %s: not a regular file of at "
                                       "most %u bytes",
                                       path, PEER_KEY_MAX);
        if (st.st_mode & 0077)
                log_warning("cluster_key_file %s can be read by others (mode %04o)", path,
                            (unsigned)(st.st_mode & 07777));
        key = malloc((size_t)st.st_size + 1);
        if (!key)
                return -ENOMEM;
        while (len < (size_t)st.st_size) {
                ssize_t n = read(fd, key + len, (size_t)st.st_size - len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return log_error_errno(n < 0 ? -errno : -EIO, "cluster_key_file %s", path);
                len += (size_t)n;
        }
        /* A key written with echo ends in a newline that is not part of it. */
        while (len > 0 && (key[len - 1] == '\n' || key[len - 1] == '\r'))
                len--;
        if (len < PEER_KEY_MIN) {
                explicit_bzero(key, (size_t)st.st_size);
                return log_error_errno(-EINVAL,
                                       "cluster_key_file %s: the key must be at least "
                                       "%d bytes",
                                       path, PEER_KEY_MIN);
        }
        root->cluster_key = TAKE_PTR(key);
        root->cluster_key_len = len;
        return 0;
}
