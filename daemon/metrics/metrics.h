/* SPDX-License-Identifier: MIT */
/*
 * Metrics: what kvdistd shows to Prometheus. Gauges are read from the daemon's state when the
 * document is built; transfer outcomes (by direction, transport and status), bytes and latency
 * histograms are recorded as transfers complete. Each metric family is one small function in
 * metrics.c's family table: adding a family is adding a function and a line.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct Daemon Daemon;
typedef struct Metrics Metrics;
typedef struct Transfer Transfer;

/* Creates the empty recorder. Returns 0 or -ENOMEM. */
int metrics_new(Metrics **ret);

/* Accepts NULL; returns NULL. */
Metrics *metrics_free(Metrics *m);

/*
 * Makes @m record the transfers of @d as they complete (transfer/transfer-events.h): their
 * count by status, and for a success their bytes and latency. Once, at start.
 */
void metrics_listen(Metrics *m, Daemon *d);

/*
 * Builds the Prometheus text document of @d into *@ret (malloc()ed, NUL-terminated) and
 * *@ret_len. Returns 0 or -ENOMEM.
 */
int metrics_render(Daemon *d, char **ret, size_t *ret_len);
