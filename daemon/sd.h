/* SPDX-License-Identifier: MIT */
/* The daemon's only contact with libsystemd: service-manager notifications. No-ops without it. */
#pragma once

#include <stdbool.h>

/* READY=1 plus STATUS=@status. Returns 0 or negative errno; 0 without NOTIFY_SOCKET. */
int sd_service_ready(const char *status);
/* STATUS=@status. */
int sd_service_status(const char *status);
/* STOPPING=1. */
int sd_service_stopping(void);
/* WATCHDOG=1. */
int sd_service_watchdog(void);
/* The watchdog interval the manager asked for in microseconds, 0 when none. */
unsigned long long sd_service_watchdog_usec(void);
