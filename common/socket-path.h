/* SPDX-License-Identifier: MIT */
/* Where kvdistd listens by default: one rule for the daemon, the library and the tools. */
#pragma once

#include <stddef.h>

#define SOCKET_PATH_DEFAULT_ROOT "/run/kvdist/kvdist.sock"

/*
 * Writes the default socket path for this process's effective uid into @buf: the system socket
 * for root, else $XDG_RUNTIME_DIR/kvdist/kvdist.sock when that variable is an absolute path,
 * else /tmp/kvdist-UID/kvdist.sock. Returns 0, or -ENAMETOOLONG when @size is too small.
 */
int socket_path_default(char *buf, size_t size);
