/* SPDX-License-Identifier: MIT */
/*
 * Notify: the short messages a push carries to its destination cluster, delivered only after
 * every byte of the push landed. Each cluster keeps a bounded queue of them
 * (limits.max_notifies_per_client) and, once asked for one, an eventfd that is readable while
 * the queue is not empty, so a worker can poll for them.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/completion.h"
#include "common/error.h"

typedef struct Cluster Cluster;

/* LIMIT_EXCEEDED when @c's queue is full (checked before a push moves a byte). */
int notify_check_room(const Cluster *c, Error *err);

/* Queues a notification from @src_cluster_id for @c and wakes its eventfd. -ENOMEM. */
int notify_deliver(Cluster *c, uint64_t src_cluster_id, const void *data, size_t len);

/* Drops @c's queue and its eventfd (the cluster is going away). */
void notify_clear(Cluster *c);

/*
 * The client requests about notifications of @c: NotifyFd answers @done with the cluster's
 * eventfd, GetNotifies with up to @max queued notifications (taken off the queue). Each returns
 * 0 when it answered, or a STATUS_* status with @err filled (@done is still the caller's).
 */
int notify_handle_fd(Cluster *c, Completion *done, Error *err);
int notify_handle_get(Cluster *c, uint32_t max, Completion *done, Error *err);
