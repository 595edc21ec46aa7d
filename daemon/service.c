/* SPDX-License-Identifier: MIT */
/* Service: READY/STATUS/WATCHDOG/RELOADING/STOPPING for the service manager, paced by the loop. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "common/log.h"
#include "daemon/sd.h"
#include "daemon/service.h"

#define SERVICE_STATUS_MAX 256

struct Service {
        struct event_base *base;
        service_status_fn status_fn;
        void *userdata;
        usec_t status_interval;

        struct event *status_timer; /* armed while an update waits for its interval */
        usec_t last_status_usec;    /* CLOCK_MONOTONIC of the last STATUS= */
        char last_status[SERVICE_STATUS_MAX];
        uint64_t n_status_sent;
        bool ready;
        bool stopping;

        struct event *watchdog_timer;
        usec_t watchdog_interval;
};

static struct timeval timeval_from_usec(usec_t u)
{
        return (struct timeval){.tv_sec = (time_t)(u / USEC_PER_SEC),
                                .tv_usec = (suseconds_t)(u % USEC_PER_SEC)};
}

/* Sends the current summary unless the manager has it already; with READY=1 when @ready. */
static void service_send_status(Service *s, bool ready)
{
        char buf[SERVICE_STATUS_MAX];
        int r;

        s->status_fn(s->userdata, buf, sizeof(buf));
        if (!ready && strcmp(buf, s->last_status) == 0)
                return;
        r = ready ? sd_service_ready(buf) : sd_service_status(buf);
        if (r < 0)
                log_debug_errno(r, "cannot notify the service manager, ignoring");
        memcpy(s->last_status, buf, sizeof(buf));
        s->last_status_usec = now_usec(CLOCK_MONOTONIC);
        s->n_status_sent++;
}

static void service_on_status_timer(evutil_socket_t fd, short what, void *userdata)
{
        Service *s = userdata;

        service_send_status(s, false);
}

static void service_on_watchdog(evutil_socket_t fd, short what, void *userdata)
{
        int r;

        r = sd_service_watchdog();
        if (r < 0)
                log_debug_errno(r, "cannot ping the watchdog, ignoring");
}

int service_new(struct event_base *base, usec_t status_interval, service_status_fn status_fn,
                void *userdata, Service **ret)
{
        Service *s;
        usec_t wd;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->base = base;
        s->status_fn = status_fn;
        s->userdata = userdata;
        s->status_interval = status_interval > 0 ? status_interval : SERVICE_STATUS_INTERVAL_USEC;
        s->status_timer = evtimer_new(base, service_on_status_timer, s);
        if (!s->status_timer) {
                service_free(s);
                return -ENOMEM;
        }

        wd = sd_service_watchdog_usec();
        if (wd > 0) {
                struct timeval tv;

                /* Half the manager's timeout: one late ping still arrives in time. */
                s->watchdog_interval = wd / 2 > 0 ? wd / 2 : 1;
                tv = timeval_from_usec(s->watchdog_interval);
                s->watchdog_timer = event_new(base, -1, EV_PERSIST, service_on_watchdog, s);
                if (!s->watchdog_timer || event_add(s->watchdog_timer, &tv) < 0) {
                        service_free(s);
                        return -ENOMEM;
                }
                log_info("watchdog: pinging the service manager every %llu ms",
                         (unsigned long long)(s->watchdog_interval / USEC_PER_MSEC));
        }
        *ret = s;
        return 0;
}

Service *service_free(Service *s)
{
        if (!s)
                return NULL;
        if (s->status_timer)
                event_free(s->status_timer);
        if (s->watchdog_timer)
                event_free(s->watchdog_timer);
        free(s);
        return NULL;
}

void service_ready(Service *s)
{
        s->ready = true;
        if (s->status_timer)
                event_del(s->status_timer);
        service_send_status(s, true);
        /* A first ping right away: the manager's clock started before our loop did. */
        if (s->watchdog_timer)
                service_on_watchdog(-1, 0, s);
}

void service_status_changed(Service *s)
{
        usec_t now, next;
        struct timeval tv;

        if (!s || !s->ready || evtimer_pending(s->status_timer, NULL))
                return;
        now = now_usec(CLOCK_MONOTONIC);
        next = s->last_status_usec + s->status_interval;
        if (now >= next) {
                service_send_status(s, false);
                return;
        }
        tv = timeval_from_usec(next - now);
        if (evtimer_add(s->status_timer, &tv) < 0)
                log_debug("cannot arm the status timer, ignoring");
}

void service_reloading(Service *s)
{
        int r;

        r = sd_service_reloading();
        if (r < 0)
                log_debug_errno(r, "cannot notify the service manager, ignoring");
}

void service_stopping(Service *s)
{
        int r;

        if (!s || s->stopping)
                return;
        s->stopping = true;
        r = sd_service_stopping();
        if (r < 0)
                log_debug_errno(r, "cannot notify the service manager, ignoring");
        if (s->ready) {
                event_del(s->status_timer);
                service_send_status(s, false);
        }
}

usec_t service_watchdog_interval(const Service *s)
{
        return s ? s->watchdog_interval : 0;
}

uint64_t service_n_status_sent(const Service *s)
{
        return s ? s->n_status_sent : 0;
}
