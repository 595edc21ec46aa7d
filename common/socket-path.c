/* SPDX-License-Identifier: MIT */
/* The default socket path rule shared by kvdistd, libkvdist and the tools. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "socket-path.h"

int socket_path_default(char *buf, size_t size)
{
        const char *xdg;
        int n;

        if (geteuid() == 0)
                n = snprintf(buf, size, "%s", SOCKET_PATH_DEFAULT_ROOT);
        else if ((xdg = secure_getenv("XDG_RUNTIME_DIR")) && xdg[0] == '/')
                n = snprintf(buf, size, "%s/kvdist/kvdist.sock", xdg);
        else
                n = snprintf(buf, size, "/tmp/kvdist-%u/kvdist.sock", (unsigned)geteuid());
        if (n < 0 || (size_t)n >= size)
                return -ENAMETOOLONG;
        return 0;
}
