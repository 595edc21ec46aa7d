/* SPDX-License-Identifier: MIT */
/*
 * Config diff: what a reload (SIGHUP) would change, key by key, and which of those changes the
 * running daemon can take (log level, most limits, allow-lists, the default transfer timeout)
 * and which need a restart (socket, pool, copy threads, devices, the metrics listener, the
 * frame size clients were told at Hello).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "daemon/config.h"

typedef struct ConfigChange {
        char key[64];       /* "log_level", "limits.max_clients" */
        char old_value[96]; /* as the config file would spell it; cut at 95 bytes */
        char new_value[96];
        bool runtime; /* true: a reload applies it; false: it needs a restart */
} ConfigChange;

/*
 * Compares @old with @new. *@ret is a malloc()ed array of *@ret_n changes in the order of the
 * file's keys (NULL and 0 when nothing changed). Returns 0 or -ENOMEM.
 */
int config_diff(const Config *old, const Config *new, ConfigChange **ret, size_t *ret_n);

/*
 * Copies into @c every setting of @new that a running daemon can take (those config_diff()
 * marks runtime); the others stay as they are. Returns 0 or -ENOMEM (then @c is unchanged).
 */
int config_apply_runtime(Config *c, const Config *new);
