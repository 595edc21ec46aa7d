/* SPDX-License-Identifier: MIT */
/* Listener: the daemon's Unix socket, peer credentials and the uid/gid allow-list. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "conn.h"
#include "daemon.h"
#include "listener.h"
#include "log.h"

struct Listener {
        Daemon *daemon;
        int fd;
        char *path;
        struct event *ev;
};

static int mkdir_parents(const char *path, mode_t mode)
{
        _cleanup_free_ char *dir = strdup(path);
        char *slash;

        if (!dir)
                return -ENOMEM;
        slash = strrchr(dir, '/');
        if (!slash || slash == dir)
                return 0;
        *slash = '\0';
        for (char *p = dir + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                if (mkdir(dir, mode) < 0 && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        if (mkdir(dir, mode) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static bool listener_allows(const Config *cfg, const struct ucred *cred)
{
        if (cfg->n_allow_uids == 0 && cfg->n_allow_gids == 0)
                return true;
        if (cred->uid == 0)
                return true;
        for (size_t i = 0; i < cfg->n_allow_uids; i++)
                if (cfg->allow_uids[i] == cred->uid)
                        return true;
        for (size_t i = 0; i < cfg->n_allow_gids; i++)
                if (cfg->allow_gids[i] == cred->gid)
                        return true;
        return false;
}

/* Accepts a bounded number of connections per wake-up so a flood cannot starve the loop. */
static void listener_on_accept(evutil_socket_t fd, short what, void *userdata)
{
        Listener *l = userdata;
        Daemon *d = l->daemon;

        for (int n = 0; n < 16; n++) {
                _cleanup_close_ int cfd = -1;
                struct ucred cred;
                socklen_t len = sizeof(cred);
                Conn *conn;
                int r;

                cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0) {
                        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                                log_warning_errno(-errno, "listener %s: accept failed, ignoring",
                                                  l->path);
                        return;
                }
                if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                        log_warning_errno(-errno, "listener %s: SO_PEERCRED failed, refusing",
                                          l->path);
                        d->counters.conns_refused++;
                        continue;
                }
                if (!listener_allows(d->config, &cred)) {
                        log_warning("listener %s: pid %d uid %u gid %u is not in the allow-list, "
                                    "refusing", l->path, (int)cred.pid, (unsigned)cred.uid,
                                    (unsigned)cred.gid);
                        d->counters.conns_refused++;
                        continue;
                }
                if (d->n_conns >= d->config->limits.max_clients * 2) {
                        log_warning("listener %s: %u connections open, refusing pid %d",
                                    l->path, d->n_conns, (int)cred.pid);
                        d->counters.conns_refused++;
                        continue;
                }
                r = conn_new(d, TAKE_FD(cfd), &cred, &conn);
                if (r < 0) {
                        log_warning_errno(r, "listener %s: cannot set up connection, ignoring",
                                          l->path);
                        continue;
                }
                d->counters.conns_accepted++;
        }
}

int listener_new(Daemon *d, Listener **ret)
{
        const Config *cfg = d->config;
        _cleanup_close_ int fd = -1;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        Listener *l;
        int r;

        if (strlen(cfg->socket_path) >= sizeof(sa.sun_path))
                return log_error_errno(-ENAMETOOLONG, "socket path %s is too long",
                                       cfg->socket_path);
        strcpy(sa.sun_path, cfg->socket_path);

        r = mkdir_parents(cfg->socket_path, 0755);
        if (r < 0)
                return log_error_errno(r, "cannot create the directory of %s", cfg->socket_path);

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(-errno, "cannot create a Unix socket");

        /* A socket file left by a daemon that died is replaced; a live daemon is not. */
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN)
                return log_error_errno(-EADDRINUSE, "another kvdistd is listening on %s",
                                       cfg->socket_path);
        safe_close(fd);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(-errno, "cannot create a Unix socket");
        (void)unlink(cfg->socket_path);

        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return log_error_errno(-errno, "cannot bind %s", cfg->socket_path);
        if (chmod(cfg->socket_path, cfg->socket_mode) < 0) {
                r = -errno;
                (void)unlink(cfg->socket_path);
                return log_error_errno(r, "cannot set mode %04o on %s", cfg->socket_mode,
                                       cfg->socket_path);
        }
        if (listen(fd, SOMAXCONN) < 0) {
                r = -errno;
                (void)unlink(cfg->socket_path);
                return log_error_errno(r, "cannot listen on %s", cfg->socket_path);
        }

        l = calloc(1, sizeof(*l));
        if (!l)
                return -ENOMEM;
        l->daemon = d;
        l->fd = -1;
        l->path = strdup(cfg->socket_path);
        l->ev = event_new(d->base, fd, EV_READ | EV_PERSIST, listener_on_accept, l);
        if (!l->path || !l->ev || event_add(l->ev, NULL) < 0) {
                (void)unlink(cfg->socket_path);
                listener_free(l);
                return -ENOMEM;
        }
        l->fd = TAKE_FD(fd);
        *ret = l;
        return 0;
}

void listener_pause(Listener *l)
{
        if (l && l->ev)
                event_del(l->ev);
}

Listener *listener_free(Listener *l)
{
        if (!l)
                return NULL;
        if (l->ev)
                event_free(l->ev);
        if (l->fd >= 0) {
                safe_close(l->fd);
                (void)unlink(l->path);
        }
        free(l->path);
        free(l);
        return NULL;
}

const char *listener_path(const Listener *l)
{
        return l->path;
}
