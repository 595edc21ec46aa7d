/* SPDX-License-Identifier: MIT */
/*
 * Service-manager notifications through libsystemd's sd_notify() and the sockets of socket
 * activation through sd_listen_fds_with_names(); no-ops when built without libsystemd.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "kvdist-config.h"
#include "common/macro.h"
#include "daemon/sd.h"

#if HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>

/*
 * Sends @head, then STATUS=@status when @status is not NULL. A newline in @status would start a
 * new assignment (READY=1, MAINPID=...), so newlines become spaces.
 */
static int notify(const char *head, const char *status)
{
        _cleanup_free_ char *msg = NULL;
        int r;

        if (status) {
                if (asprintf(&msg, "%s%sSTATUS=%s", head, head[0] ? "\n" : "", status) < 0)
                        return -ENOMEM;
                for (char *p = msg + strlen(head) + (head[0] ? 1 : 0); *p; p++)
                        if (*p == '\n')
                                *p = ' ';
        }
        r = sd_notify(0, msg ? msg : head);
        return r < 0 ? r : 0;
}

unsigned long long sd_service_watchdog_usec(void)
{
        uint64_t usec = 0;

        if (sd_watchdog_enabled(0, &usec) <= 0)
                return 0;
        return usec;
}

int sd_service_listen_fds(SdListenFd **ret, size_t *ret_n)
{
        char **names = NULL;
        SdListenFd *fds = NULL;
        int n;

        n = sd_listen_fds_with_names(1, &names);
        if (n < 0)
                return n;
        if (n > 0) {
                fds = calloc((size_t)n, sizeof(*fds));
                if (!fds) {
                        for (int i = 0; i < n; i++)
                                (void)close(SD_LISTEN_FDS_START + i);
                }
        }
        for (int i = 0; i < n && fds; i++) {
                int fd = SD_LISTEN_FDS_START + i;

                /* The manager passes them inheritable; nothing the daemon runs should see them. */
                (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
                fds[i].fd = fd;
                (void)snprintf(fds[i].name, sizeof(fds[i].name), "%s",
                               names && names[i] ? names[i] : "unknown");
        }
        for (int i = 0; names && names[i]; i++)
                free(names[i]);
        free(names);
        if (n > 0 && !fds)
                return -ENOMEM;
        *ret = fds;
        *ret_n = (size_t)n;
        return 0;
}

int sd_service_is_stream_listener(int fd, int family)
{
        return sd_is_socket(fd, family, SOCK_STREAM, 1);
}

#else

static int notify(const char *head, const char *status)
{
        return 0;
}

unsigned long long sd_service_watchdog_usec(void)
{
        return 0;
}

int sd_service_listen_fds(SdListenFd **ret, size_t *ret_n)
{
        *ret = NULL;
        *ret_n = 0;
        return 0;
}

int sd_service_is_stream_listener(int fd, int family)
{
        int type = 0, listening = 0, domain = 0;
        socklen_t len = sizeof(int);

        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
                return -errno;
        len = sizeof(int);
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0)
                return -errno;
        len = sizeof(int);
        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0)
                return -errno;
        return type == SOCK_STREAM && listening && (family == 0 || domain == family);
}

#endif

int sd_service_ready(const char *status)
{
        return notify("READY=1", status);
}

int sd_service_status(const char *status)
{
        return notify("", status ? status : "");
}

int sd_service_stopping(void)
{
        return notify("STOPPING=1", NULL);
}

int sd_service_reloading(void)
{
        struct timespec ts;
        char buf[64];

        (void)clock_gettime(CLOCK_MONOTONIC, &ts);
        (void)snprintf(buf, sizeof(buf), "RELOADING=1\nMONOTONIC_USEC=%llu",
                       (unsigned long long)ts.tv_sec * 1000000ULL +
                               (unsigned long long)ts.tv_nsec / 1000ULL);
        return notify(buf, NULL);
}

int sd_service_watchdog(void)
{
        return notify("WATCHDOG=1", NULL);
}
