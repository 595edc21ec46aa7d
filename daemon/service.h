/* SPDX-License-Identifier: MIT */
/*
 * Service: what the daemon tells its service manager, paced by the event loop. READY=1 once the
 * listeners accept, STATUS= with a one-line summary at most once per status interval (however
 * often the state changes), WATCHDOG=1 from a loop timer at half the manager's WatchdogSec=
 * (so a wedged loop stops the pings and gets the daemon restarted), RELOADING=1 around a
 * reload and STOPPING=1 on the way out. Talks to the manager only through sd.h.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/time-util.h"

struct event_base;
typedef struct Service Service;

/* Writes the one-line summary (no newline) into @buf of @size bytes. */
typedef void (*service_status_fn)(void *userdata, char *buf, size_t size);

/* The default pace of STATUS= updates. */
#define SERVICE_STATUS_INTERVAL_USEC (1 * USEC_PER_SEC)

/*
 * Creates the notifier on @base. @status_fn (with @userdata) gives the summary whenever one is
 * due; @status_interval is the shortest gap between two STATUS= updates (0: the default). Arms
 * the watchdog timer when the manager asked for one ($WATCHDOG_USEC). Returns 0 or -ENOMEM.
 */
int service_new(struct event_base *base, usec_t status_interval, service_status_fn status_fn,
                void *userdata, Service **ret);

/* Stops the timers. Accepts NULL; returns NULL. */
Service *service_free(Service *s);

/* READY=1 with the summary; STATUS= updates start after this. */
void service_ready(Service *s);

/* The summary may have changed: sends it now, or at the end of the current interval. */
void service_status_changed(Service *s);

/* RELOADING=1; service_ready() ends the reload. */
void service_reloading(Service *s);

/* STOPPING=1 and a last summary ("stopping: ..."); the watchdog keeps pinging until the end. */
void service_stopping(Service *s);

/* The watchdog ping interval in microseconds, 0 when there is no watchdog. */
usec_t service_watchdog_interval(const Service *s);

/* STATUS= messages sent so far (READY=1 included), for tests. */
uint64_t service_n_status_sent(const Service *s);
