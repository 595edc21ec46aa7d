/* SPDX-License-Identifier: MIT */
/* The default socket path rule shared by kvdistd, libkvdist and the tools, and the checks on the
 * per-user fallback folder. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/socket-path.h"

int socket_path_default(char *buf, size_t size)
{
        const char *xdg;
        int n;

        if (geteuid() == 0)
                n = snprintf(buf, size, "%s", SOCKET_PATH_DEFAULT_ROOT);
        else if ((xdg = secure_getenv("XDG_RUNTIME_DIR")) && xdg[0] == '/')
                n = snprintf(buf, size, "%s/kvdist/kvdist.sock", xdg);
        else
                n = snprintf(buf, size, SOCKET_PATH_FALLBACK_PREFIX "%u/kvdist.sock",
                             (unsigned)geteuid());
        if (n < 0 || (size_t)n >= size)
                return -ENAMETOOLONG;
        return 0;
}

/*
 * Whether @path lies in a fallback folder "/tmp/kvdist-UID/": the folder's part of @path into
 * @dir and its uid into *@ret_uid.
 */
static bool fallback_folder(const char *path, char *dir, size_t size, uid_t *ret_uid)
{
        const char *p = path + strlen(SOCKET_PATH_FALLBACK_PREFIX);
        uintmax_t uid = 0;
        size_t len;

        if (strncmp(path, SOCKET_PATH_FALLBACK_PREFIX, strlen(SOCKET_PATH_FALLBACK_PREFIX)) != 0)
                return false;
        if (*p < '0' || *p > '9')
                return false;
        for (; *p >= '0' && *p <= '9'; p++) {
                uid = uid * 10 + (uintmax_t)(*p - '0');
                if (uid > (uid_t)-2)
                        return false;
        }
        if (*p != '/')
                return false;
        len = (size_t)(p - path);
        if (len >= size)
                return false;
        memcpy(dir, path, len);
        dir[len] = '\0';
        *ret_uid = (uid_t)uid;
        return true;
}

int socket_path_check_dir(const char *path, bool create, char *msg, size_t size)
{
        char dir[64];
        struct stat st;
        uid_t uid;

        if (!fallback_folder(path, dir, sizeof(dir), &uid))
                return 0;

        if (create && uid == geteuid() && mkdir(dir, 0700) < 0 && errno != EEXIST) {
                int r = -errno;

                (void)snprintf(msg, size, "cannot create %s: %s", dir, strerror(-r));
                return r;
        }
        if (lstat(dir, &st) < 0) {
                int r = -errno;

                (void)snprintf(msg, size, "%s: %s", dir, strerror(-r));
                return r;
        }
        if (S_ISLNK(st.st_mode)) {
                (void)snprintf(msg, size,
                               "%s is a symbolic link; it must be a folder of uid %u, "
                               "not a link to one",
                               dir, (unsigned)uid);
                return -ELOOP;
        }
        if (!S_ISDIR(st.st_mode)) {
                (void)snprintf(msg, size, "%s is not a folder", dir);
                return -ENOTDIR;
        }
        if (st.st_uid != uid) {
                (void)snprintf(msg, size,
                               "%s is owned by uid %u, not %u: another user may have "
                               "made it to take the socket over",
                               dir, (unsigned)st.st_uid, (unsigned)uid);
                return -EPERM;
        }
        if (st.st_mode & (S_IWGRP | S_IWOTH)) {
                (void)snprintf(msg, size,
                               "%s is writable by group or others (mode %04o); make "
                               "it 0700",
                               dir, (unsigned)(st.st_mode & 07777));
                return -EACCES;
        }
        return 0;
}
