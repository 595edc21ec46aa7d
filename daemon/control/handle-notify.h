/* SPDX-License-Identifier: MIT */
/* GetNotifies: the push notifications link/ queued for a cluster, encoded for its client. */
#pragma once

#include <stdint.h>

#include "common/completion.h"
#include "common/error.h"

typedef struct Cluster Cluster;

/*
 * Answers @done with up to @max of @c's queued notifications, taken off the queue. Returns 0
 * when it answered, or a STATUS_* status with @err filled (@done is still the caller's).
 */
int handle_notify_get(Cluster *c, uint32_t max, Completion *done, Error *err);
