/* SPDX-License-Identifier: MIT */
/* GetNotifies: a cluster's queued push and pull notifications into the client's reply. */
#include <stdlib.h>

#include "daemon/control/handle-notify.h"
#include "daemon/link/cluster.h"
#include "daemon/link/notify.h"
#include "proto/kvdist.pb-c.h"
#include "common/status.h"

int handle_notify_get(Cluster *c, uint32_t max, Completion *done, Error *err)
{
        Kvdist__V1__GetNotifiesReply reply = KVDIST__V1__GET_NOTIFIES_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        _cleanup_free_ Kvdist__V1__Notify *items = NULL;
        _cleanup_free_ Kvdist__V1__Notify **ptrs = NULL;
        size_t n = notify_count_takeable(c, max), i = 0;
        CList taken = CLIST_INIT(taken);
        NotifyEvent *e;

        /* Room first: a reply that cannot be built takes nothing off the queue. */
        if (n > 0) {
                items = calloc(n, sizeof(*items));
                ptrs = calloc(n, sizeof(*ptrs));
                if (!items || !ptrs)
                        return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        }
        n = notify_take(c, max, &taken);
        CLIST_FOREACH (e, &taken, link) {
                kvdist__v1__notify__init(&items[i]);
                items[i].src_cluster_id = e->src_cluster_id;
                items[i].kind = e->pull ? KVDIST__V1__NOTIFY_KIND__NOTIFY_KIND_PULL
                                        : KVDIST__V1__NOTIFY_KIND__NOTIFY_KIND_PUSH;
                items[i].data.data = e->data;
                items[i].data.len = e->len;
                ptrs[i] = &items[i];
                i++;
        }
        reply.status = &status;
        reply.notifies = ptrs;
        reply.n_notifies = n;
        reply.remaining = c->n_notifies;
        /* A reply that cannot be sent means the connection, and the cluster with it, is gone. */
        (void)completion_reply(done, &reply.base, -1);
        notify_list_free(&taken);
        return 0;
}
