/* SPDX-License-Identifier: MIT */
/*
 * The daemon's only contact with libsystemd: service-manager notifications and the sockets of
 * socket activation. Without libsystemd the notifications are no-ops and no socket is passed.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* READY=1 plus STATUS=@status. Returns 0 or negative errno; 0 without NOTIFY_SOCKET. */
int sd_service_ready(const char *status);
/* STATUS=@status. */
int sd_service_status(const char *status);
/* STOPPING=1. */
int sd_service_stopping(void);
/* RELOADING=1 with MONOTONIC_USEC= (the manager waits for READY=1 again). */
int sd_service_reloading(void);
/* WATCHDOG=1. */
int sd_service_watchdog(void);
/* The watchdog interval the manager asked for in microseconds, 0 when none. */
unsigned long long sd_service_watchdog_usec(void);

/* One socket passed by the service manager, with the FileDescriptorName= its unit gave it. */
typedef struct SdListenFd {
        int fd;
        char name[256]; /* "unknown" when the manager named none */
} SdListenFd;

/*
 * Takes the sockets of socket activation ($LISTEN_FDS, $LISTEN_FDNAMES, for this pid) and
 * unsets those variables. *@ret is a malloc()ed array of *@ret_n entries (NULL and 0 when none
 * were passed); the caller owns the fds, which are made O_CLOEXEC. Returns 0 or negative errno.
 */
int sd_service_listen_fds(SdListenFd **ret, size_t *ret_n);

/*
 * Whether @fd is a listening socket of @family (AF_UNIX, AF_INET, ...; 0 = any) and SOCK_STREAM:
 * 1 or 0; negative errno when @fd cannot be inspected.
 */
int sd_service_is_stream_listener(int fd, int family);
