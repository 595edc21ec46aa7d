/* SPDX-License-Identifier: MIT */
/* Status: the daemon's state as the JSON document kvdistctl shows (schema in docs/kvdistctl.md). */
#pragma once

typedef struct Daemon Daemon;

/* Builds the document; *@ret is malloc()ed. -ENOMEM. */
int status_to_json(Daemon *d, char **ret);
