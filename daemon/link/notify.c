/* SPDX-License-Identifier: MIT */
/* Notify: push and pull notifications queued for a cluster, an eventfd to poll, and their requests.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/link/notify.h"
#include "common/status.h"

int notify_check_room(const Cluster *c, User *payer, Error *err)
{
        uint32_t max = c->root->options.limits->max_notifies_per_client;

        if (c->n_notifies >= max)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "cluster %" PRIu64 " has %u notifications it has not taken "
                                 "(limits.max_notifies_per_client)",
                                 c->id, c->n_notifies);
        return user_check(payer ?: c->user, USER_SLOT_NOTIFIES, 1, err);
}

static void notify_event_free(NotifyEvent *e)
{
        user_uncharge(e->user, USER_SLOT_NOTIFIES, 1);
        user_unref(e->user);
        free(e);
}

/* Sets the eventfd to the number of queued notifications' parity: readable iff any wait. */
static void notify_signal(Cluster *c)
{
        uint64_t v;

        if (c->notify_fd < 0)
                return;
        /* Drain, then raise again if something waits: readability tracks the queue. */
        (void)!read(c->notify_fd, &v, sizeof(v));
        if (c->n_notifies > 0) {
                v = 1;
                (void)!write(c->notify_fd, &v, sizeof(v));
        }
}

int notify_deliver(Cluster *c, uint64_t src_cluster_id, bool pull, const void *data, size_t len,
                   User *payer)
{
        NotifyEvent *n;

        if (len > NOTIFY_DATA_MAX)
                return -EINVAL;
        n = calloc(1, sizeof(*n));
        if (!n)
                return -ENOMEM;
        n->src_cluster_id = src_cluster_id;
        n->pull = pull;
        /* Checked when the transfer began: a few transfers that were in flight together may pass
         * the limit by as many, never more. */
        n->user = user_ref(payer ?: c->user);
        user_charge_force(n->user, USER_SLOT_NOTIFIES, 1);
        n->len = len;
        memcpy(n->data, data, len);
        clist_link_tail(&c->notifies, &n->link);
        c->n_notifies++;
        c->root->counters.notifies_delivered++;
        notify_signal(c);
        return 0;
}

void notify_clear(Cluster *c)
{
        NotifyEvent *n, *tmp;

        CLIST_FOREACH_SAFE (n, tmp, &c->notifies, link) {
                clist_unlink(&n->link);
                notify_event_free(n);
        }
        c->n_notifies = 0;
        c->notify_fd = safe_close(c->notify_fd);
}

int notify_handle_fd(Cluster *c, Completion *done, Error *err)
{

        if (c->notify_fd < 0) {
                c->notify_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
                if (c->notify_fd < 0)
                        return error_set(err, STATUS_OUT_OF_MEMORY, "eventfd: %s", strerror(errno));
                notify_signal(c);
        }
        /* The client gets its own duplicate; both name the same eventfd. */
        return completion_reply_ok(done, c->notify_fd), 0;
}

size_t notify_count_takeable(const Cluster *c, uint32_t max)
{
        /* A reply stays far below the frame limit: 4096 x ~280 bytes. */
        return MIN(MIN((size_t)max, (size_t)c->n_notifies), (size_t)4096);
}

size_t notify_take(Cluster *c, uint32_t max, CList *ret)
{
        size_t n = notify_count_takeable(c, max), i;
        NotifyEvent *e;

        for (i = 0; i < n; i++) {
                e = clist_first_entry(&c->notifies, NotifyEvent, link);
                clist_unlink(&e->link);
                clist_link_tail(ret, &e->link);
                c->n_notifies--;
        }
        /* The eventfd tells the truth before the client can see the reply and poll again. */
        notify_signal(c);
        return n;
}

void notify_list_free(CList *list)
{
        NotifyEvent *e, *tmp;

        CLIST_FOREACH_SAFE (e, tmp, list, link) {
                clist_unlink(&e->link);
                notify_event_free(e);
        }
}
