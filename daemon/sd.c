/* SPDX-License-Identifier: MIT */
/* Service-manager notifications through libsystemd's sd_notify(); no-ops when built without it. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvdist-config.h"
#include "macro.h"
#include "sd.h"

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

#else

static int notify(const char *head, const char *status)
{
        return 0;
}

unsigned long long sd_service_watchdog_usec(void)
{
        return 0;
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

int sd_service_watchdog(void)
{
        return notify("WATCHDOG=1", NULL);
}
