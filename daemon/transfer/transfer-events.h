/* SPDX-License-Identifier: MIT */
/*
 * TransferEvents: what transfer/ announces to the layers above it (metrics/), which add their
 * Hook to the daemon's list at start (common/hook.h). transfer/ never names them.
 */
#pragma once

#include "common/hook.h"

typedef struct Daemon Daemon;
typedef struct Transfer Transfer;

typedef struct TransferEvents {
        /* @x completed with @status (STATUS_OK or STATUS_*); @x is freed after. */
        void (*transfer_done)(void *userdata, const Transfer *x, int status);
} TransferEvents;

/* Adds @h with @events (and @userdata) to @d's listeners of transfer events. */
void transfer_events_listen(Daemon *d, Hook *h, const TransferEvents *events, void *userdata);
