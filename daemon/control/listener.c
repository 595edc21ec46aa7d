/* SPDX-License-Identifier: MIT */
/*
 * Listener: the daemon's Unix socket (its own, or the one socket activation passed), peer
 * credentials and the uid/gid allow-list.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include "daemon/control/conn.h"
#include "daemon/control/control-root.h"
#include "daemon/control/listener.h"
#include "common/log.h"
#include "common/socket-path.h"
#include "common/status.h"

struct Listener {
        ControlRoot *root;
        int fd;
        char *path;
        bool activated; /* the service manager's socket: its file is not ours */
        struct event *ev;
};

/* The FileDescriptorName= of the client socket in kvdistd.socket. */

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

/* Whether @gid is one of the allow-listed groups. */
static bool listener_gid_allowed(const ControlOptions *o, gid_t gid)
{
        for (size_t i = 0; i < *o->n_allow_gids; i++)
                if ((*o->allow_gids)[i] == gid)
                        return true;
        return false;
}

/*
 * Whether the peer of @fd (credentials @cred) passes the allow-lists: root, a listed uid, or a
 * listed group as its primary group or one of its supplementary groups (SO_PEERGROUPS: the
 * groups it held when it connected). Returns 1, 0, or a negative errno when its groups cannot be
 * read.
 */
static int listener_allows(const ControlOptions *o, int fd, const struct ucred *cred)
{
        _cleanup_free_ gid_t *groups = NULL;
        socklen_t len = 0;

        if (*o->n_allow_uids == 0 && *o->n_allow_gids == 0)
                return 1;
        if (cred->uid == 0)
                return 1;
        for (size_t i = 0; i < *o->n_allow_uids; i++)
                if ((*o->allow_uids)[i] == cred->uid)
                        return 1;
        if (*o->n_allow_gids == 0)
                return 0;
        if (listener_gid_allowed(o, cred->gid))
                return 1;

        /* The first call says how much room the groups need (ERANGE); they are few. */
        for (;;) {
                if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0)
                        break;
                if (errno != ERANGE)
                        return -errno;
                free(groups);
                groups = malloc(MAX(len, (socklen_t)sizeof(gid_t)));
                if (!groups)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < len / sizeof(gid_t); i++)
                if (listener_gid_allowed(o, groups[i]))
                        return 1;
        return 0;
}

/*
 * Admits the accepted, allowed socket @fd as a connection, or tells its client why not. The
 * daemon takes twice limits.max_clients connections, and limits.reserved_connections more that
 * may only ask read-only questions (kvdistctl status gets in while others hold the rest); each
 * uid takes at most limits.per_user.max_connections of them all. Takes @fd; returns 0 or a
 * negative errno (the socket is closed then).
 */
static int listener_admit(Listener *l, int fd, const struct ucred *cred, Conn **ret)
{
        _cleanup_close_ int owned = fd;
        ControlRoot *root = l->root;
        const Limits *lim = root->options.limits;
        uint64_t total = (uint64_t)lim->max_clients * 2;
        _cleanup_(user_unrefp) User *user = NULL;
        Error err = ERROR_INIT;
        bool reserved = false;
        char detail[256];
        int r;

        r = user_registry_ref(&root->memory->users, cred->uid, &user);
        if (r < 0) {
                log_warning_errno(r, "listener %s: cannot account uid %u, refusing", l->path,
                                  (unsigned)cred->uid);
                root->counters.conns_refused++;
                return r;
        }
        if (root->counters.conns_open >= total + lim->reserved_connections) {
                log_warning("listener %s: %u connections open, refusing pid %d uid %u", l->path,
                            root->counters.conns_open, (int)cred->pid, (unsigned)cred->uid);
                (void)snprintf(detail, sizeof(detail),
                               "kvdistd refuses uid %u: it has %u connections open, twice "
                               "limits.max_clients and all of limits.reserved_connections",
                               (unsigned)cred->uid, root->counters.conns_open);
                conn_refuse(root, fd, STATUS_LIMIT_EXCEEDED, detail);
                root->counters.conns_refused++;
                return -EUSERS;
        }
        if (root->counters.conns_open >= total)
                reserved = true;
        r = user_charge(user, USER_SLOT_CONNECTIONS, 1, &err);
        if (r < 0) {
                conn_refuse(root, fd, STATUS_LIMIT_EXCEEDED, err.msg);
                root->counters.conns_refused++;
                return -EDQUOT;
        }
        r = conn_new(root, TAKE_FD(owned), cred, user, reserved, ret);
        if (r < 0) {
                log_warning_errno(r, "listener %s: cannot set up connection, ignoring", l->path);
                return r;
        }
        if (reserved)
                log_notice("listener %s: %u connections open, pid %d uid %u gets a read-only one "
                           "of limits.reserved_connections",
                           l->path, root->counters.conns_open, (int)cred->pid, (unsigned)cred->uid);
        return 0;
}

/* Accepts a bounded number of connections per wake-up so a flood cannot starve the loop. */
static void listener_on_accept(evutil_socket_t fd, short what, void *userdata)
{
        Listener *l = userdata;
        ControlRoot *root = l->root;

        for (int n = 0; n < 16; n++) {
                _cleanup_close_ int cfd = -1;
                struct ucred cred;
                socklen_t len = sizeof(cred);
                char detail[160];
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
                        root->counters.conns_refused++;
                        continue;
                }
                r = listener_allows(&root->options, cfd, &cred);
                if (r < 0) {
                        log_warning_errno(r,
                                          "listener %s: cannot read the groups of pid %d uid "
                                          "%u (SO_PEERGROUPS), refusing",
                                          l->path, (int)cred.pid, (unsigned)cred.uid);
                        (void)snprintf(detail, sizeof(detail),
                                       "kvdistd cannot read the groups "
                                       "of uid %u to check allow_gids",
                                       (unsigned)cred.uid);
                        conn_refuse(root, cfd, STATUS_PERMISSION_DENIED, detail);
                        root->counters.conns_refused++;
                        continue;
                }
                if (r == 0) {
                        log_warning("listener %s: pid %d uid %u gid %u is not in the allow-list, "
                                    "refusing",
                                    l->path, (int)cred.pid, (unsigned)cred.uid, (unsigned)cred.gid);
                        (void)snprintf(detail, sizeof(detail),
                                       "kvdistd refuses uid %u gid %u: "
                                       "neither is in its allow_uids or allow_gids, nor any "
                                       "group of the process",
                                       (unsigned)cred.uid, (unsigned)cred.gid);
                        conn_refuse(root, cfd, STATUS_PERMISSION_DENIED, detail);
                        root->counters.conns_refused++;
                        continue;
                }
                r = listener_admit(l, TAKE_FD(cfd), &cred, &conn);
                if (r < 0)
                        continue;
                root->counters.conns_accepted++;
        }
}

/* Wraps the listening @fd (owned from here on) at @path into a Listener on the loop. */
static int listener_wrap(ControlRoot *root, int fd, const char *path, bool activated,
                         Listener **ret)
{
        _cleanup_close_ int owned = fd;
        Listener *l;

        l = calloc(1, sizeof(*l));
        if (!l)
                return -ENOMEM;
        l->root = root;
        l->fd = -1;
        l->activated = activated;
        l->path = strdup(path);
        l->ev = event_new(root->base, fd, EV_READ | EV_PERSIST, listener_on_accept, l);
        if (!l->path || !l->ev || event_add(l->ev, NULL) < 0) {
                listener_free(l);
                return -ENOMEM;
        }
        l->fd = TAKE_FD(owned);
        *ret = l;
        return 0;
}

static int listener_new_activated(ControlRoot *root, int fd, Listener **ret)
{
        _cleanup_close_ int owned = fd;
        struct sockaddr_un sa = {};
        socklen_t len = sizeof(sa);
        int r, flags;

        if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
                return log_error_errno(-errno, "socket activation: getsockname() on fd %d", fd);
        if (len <= offsetof(struct sockaddr_un, sun_path) || sa.sun_path[0] == '\0')
                return log_error_errno(-EINVAL,
                                       "socket activation: fd %d is not bound to a "
                                       "path",
                                       fd);
        sa.sun_path[sizeof(sa.sun_path) - 1] = '\0';
        flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return log_error_errno(-errno,
                                       "socket activation: cannot make fd %d "
                                       "non-blocking",
                                       fd);
        if (strcmp(sa.sun_path, root->options.socket_path) != 0)
                log_notice("socket activation: serving %s, which the service manager passed; "
                           "socket_path %s is not used",
                           sa.sun_path, root->options.socket_path);
        r = listener_wrap(root, TAKE_FD(owned), sa.sun_path, true, ret);
        if (r < 0)
                return log_error_errno(r, "cannot watch the socket %s", sa.sun_path);
        log_info("socket activation: listening on %s", sa.sun_path);
        return 0;
}

/*
 * Makes room for a socket at @path (@sa): nothing there is fine; a socket nobody answers on, left
 * by a daemon that died, is removed; a live kvdistd's socket and anything that is not a socket
 * (a file a mistyped --socket names, a folder, a symbolic link) are left alone and refused.
 * Logs what it refuses.
 */
static int listener_clear_path(const char *path, const struct sockaddr_un *sa)
{
        _cleanup_close_ int fd = -1;
        struct stat st;

        if (lstat(path, &st) < 0) {
                if (errno == ENOENT)
                        return 0;
                return log_error_errno(-errno, "cannot inspect %s", path);
        }
        if (!S_ISSOCK(st.st_mode))
                return log_error_errno(-EEXIST,
                                       "%s is not a socket, refusing to replace it; "
                                       "point --socket or socket_path at a socket path",
                                       path);

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(-errno, "cannot create a Unix socket");
        if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 || errno == EAGAIN)
                return log_error_errno(-EADDRINUSE, "another kvdistd is listening on %s", path);
        if (errno != ECONNREFUSED)
                return log_error_errno(-errno,
                                       "cannot tell whether a kvdistd listens on %s, "
                                       "not replacing it",
                                       path);
        if (unlink(path) < 0 && errno != ENOENT)
                return log_error_errno(-errno, "cannot remove the stale socket %s", path);
        log_info("replaced the stale socket %s", path);
        return 0;
}

int listener_new(ControlRoot *root, int activated_fd, Listener **ret)
{
        const char *path = root->options.socket_path;
        uint32_t mode = *root->options.socket_mode;
        _cleanup_close_ int fd = -1;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        char msg[256];
        int r;

        if (activated_fd >= 0)
                return listener_new_activated(root, activated_fd, ret);

        if (strlen(path) >= sizeof(sa.sun_path))
                return log_error_errno(-ENAMETOOLONG, "socket path %s is too long", path);
        strcpy(sa.sun_path, path);

        r = socket_path_check_dir(path, true, msg, sizeof(msg));
        if (r < 0)
                return log_error_errno(r, "cannot listen on %s: %s", path, msg);
        r = mkdir_parents(path, 0755);
        if (r < 0)
                return log_error_errno(r, "cannot create the directory of %s", path);
        r = listener_clear_path(path, &sa);
        if (r < 0)
                return r;

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(-errno, "cannot create a Unix socket");
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return log_error_errno(-errno, "cannot bind %s", path);
        if (chmod(path, mode) < 0) {
                r = -errno;
                (void)unlink(path);
                return log_error_errno(r, "cannot set mode %04o on %s", mode, path);
        }
        if (listen(fd, SOMAXCONN) < 0) {
                r = -errno;
                (void)unlink(path);
                return log_error_errno(r, "cannot listen on %s", path);
        }

        r = listener_wrap(root, TAKE_FD(fd), path, false, ret);
        if (r < 0)
                (void)unlink(path);
        return r;
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
                /* The service manager's socket outlives us: it starts the next kvdistd. */
                if (!l->activated)
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
