/* SPDX-License-Identifier: MIT */
/* Where kvdistd listens by default: one rule for the daemon, the library and the tools. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define SOCKET_PATH_DEFAULT_ROOT "/run/kvdist/kvdist.sock"
/* The per-user fallback folder is SOCKET_PATH_FALLBACK_PREFIX followed by the uid. */
#define SOCKET_PATH_FALLBACK_PREFIX "/tmp/kvdist-"

/*
 * Writes the default socket path for this process's effective uid into @buf: the system socket
 * for root, else $XDG_RUNTIME_DIR/kvdist/kvdist.sock when that variable is an absolute path,
 * else /tmp/kvdist-UID/kvdist.sock. Returns 0, or -ENAMETOOLONG when @size is too small.
 */
int socket_path_default(char *buf, size_t size);

/*
 * Checks the per-user fallback folder a socket @path lies in, if it lies in one: anyone may
 * create /tmp/kvdist-UID before its user does and put their own socket in it, to receive a
 * worker's Hello and memfds or to squat the daemon's path. Such a folder is used only when it
 * is a directory, not a symbolic link, owned by UID and writable by nobody else. With @create,
 * a missing folder is first made with mode 0700 when UID is this process's effective uid.
 * Returns 0 (also for every path outside such a folder), or a negative errno with a sentence in
 * @msg (@size bytes): -ENOENT missing, -ELOOP a symbolic link, -ENOTDIR not a directory, -EPERM
 * another owner, -EACCES writable by group or others, or what lstat() or mkdir() failed with.
 */
int socket_path_check_dir(const char *path, bool create, char *msg, size_t size);
