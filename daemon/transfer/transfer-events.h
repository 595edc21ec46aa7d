/* SPDX-License-Identifier: MIT */
/*
 * TransferEvents: what transfer/ announces to the layers above it (metrics/), which add their
 * Hook to TransferRoot.events at start (common/hook.h). transfer/ never names them.
 */
#pragma once

#include "common/hook.h"

typedef struct TransferRoot TransferRoot;
typedef struct Transfer Transfer;

typedef struct TransferEvents {
        /* @x completed with @status (STATUS_OK or STATUS_*); @x is freed after. */
        void (*transfer_done)(void *userdata, const Transfer *x, int status);
} TransferEvents;

/* Adds @h with @events (and @userdata) to @root's listeners of transfer events. */
void transfer_events_listen(TransferRoot *root, Hook *h, const TransferEvents *events,
                            void *userdata);
