/* SPDX-License-Identifier: MIT */
/*
 * Notify: the short messages a push carries to its destination cluster, delivered only after
 * every byte of the push landed, and a pull to its source cluster, delivered only after every
 * byte of the pull was read (landed at the puller). Each cluster keeps a bounded queue of them
 * (limits.max_notifies_per_client) and, once asked for one, an eventfd that is readable while
 * the queue is not empty, so a worker can poll for them.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clist.h"
#include "common/completion.h"
#include "common/error.h"
#include "daemon/memory/user.h"

#define NOTIFY_DATA_MAX 256

typedef struct Cluster Cluster;

/* One notification queued for a cluster; control/ encodes those a client takes. */
typedef struct NotifyEvent {
        CList link;              /* on Cluster.notifies, oldest first; then on the taker's list */
        uint64_t src_cluster_id; /* the cluster that pushed or (pull) pulled */
        bool pull;               /* a pull's notification, to the cluster read from */
        User *user; /* charged one of limits.per_user.max_notifies until the event is freed */
        size_t len;
        uint8_t data[NOTIFY_DATA_MAX];
} NotifyEvent;

/*
 * LIMIT_EXCEEDED when @c's queue is full, or when the uid the notification is charged to (@payer:
 * the pushing or pulling cluster's uid; NULL: @c's own, for a peer's transfer) holds as many
 * queued notifications as limits.per_user.max_notifies lets it. Checked before a transfer that
 * carries a notification moves a byte.
 */
int notify_check_room(const Cluster *c, User *payer, Error *err);

/*
 * Queues a notification from @src_cluster_id (the cluster that pushed to @c or, @pull, pulled
 * from it) for @c, charged to @payer (NULL: @c's uid; see notify_check_room(), whose check it
 * relies on), and wakes @c's eventfd. -ENOMEM.
 */
int notify_deliver(Cluster *c, uint64_t src_cluster_id, bool pull, const void *data, size_t len,
                   User *payer);

/* Drops @c's queue and its eventfd (the cluster is going away). */
void notify_clear(Cluster *c);

/*
 * NotifyFd of @c: answers @done with the cluster's eventfd. Returns 0 when it answered, or a
 * STATUS_* status with @err filled (@done is still the caller's).
 */
int notify_handle_fd(Cluster *c, Completion *done, Error *err);

/* How many notifications notify_take(@c, @max) takes now. */
size_t notify_count_takeable(const Cluster *c, uint32_t max);

/*
 * Takes up to @max of @c's oldest notifications (never more than 4096, so that a reply stays far
 * below the frame limit) off its queue onto @ret (the caller's; notify_list_free()), and sets
 * the eventfd to what is left before the taker answers its client. Returns how many.
 */
size_t notify_take(Cluster *c, uint32_t max, CList *ret);

/* Frees the NotifyEvents on @list. */
void notify_list_free(CList *list);
