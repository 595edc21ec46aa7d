/* SPDX-License-Identifier: MIT */
/*
 * Shared-memory transport: both ends of the link live on this daemon, so a transfer is a set of
 * memcpy()s between regions the daemon has mapped, run on the copy engine's threads.
 */
#include <errno.h>
#include <stdlib.h>

#include "daemon/transport/engine.h"
#include "daemon/transfer/plan.h"
#include "daemon/memory/region.h"
#include "daemon/transfer/transfer.h"
#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"
#include "common/status.h"

static void shm_on_done(EngineTask *task, int status, void *userdata)
{
        Transfer *x = userdata;

        x->transport_data = NULL;
        transfer_complete(x, status == 0 ? STATUS_OK : STATUS_FAILED);
}

/* Resolves the plan into copies; every segment is checked against its regions once more, so a
 * planner bug can fail a transfer but never move a byte outside a region. */
static int shm_submit(Transport *t, Transfer *x)
{
        const Plan *plan = x->plan;
        _cleanup_free_ EngineCopy *copies = NULL;
        EngineTask *task;
        int r;

        copies = calloc(plan->n_segments ? plan->n_segments : 1, sizeof(*copies));
        if (!copies)
                return -ENOMEM;
        for (size_t i = 0; i < plan->n_segments; i++) {
                const PlanSegment *s = &plan->segments[i];
                Region *src, *dst;
                uint64_t end;

                if (s->src_region >= x->n_regions || s->dst_region >= x->n_regions)
                        return -EFAULT;
                src = x->regions[s->src_region];
                dst = x->regions[s->dst_region];
                if (ADD_OVERFLOW(s->src_offset, s->len, &end) || end > src->size ||
                    ADD_OVERFLOW(s->dst_offset, s->len, &end) || end > dst->size)
                        return -EFAULT;
                copies[i].dst = dst->data + s->dst_offset;
                copies[i].src = src->data + s->src_offset;
                copies[i].len = s->len;
        }
        r = engine_submit(t->set->engine, copies, plan->n_segments, 0, shm_on_done, x, &task);
        if (r < 0)
                return r;
        x->transport_data = task;
        return 0;
}

static void shm_cancel(Transport *t, Transfer *x)
{
        if (x->transport_data)
                engine_cancel(x->transport_data);
}

static int shm_progress(Transport *t, const Transfer *x, uint64_t *ret)
{
        *ret = x->transport_data ? engine_task_bytes_done(x->transport_data) : 0;
        return 0;
}

static const transport_ops shm_ops = {
        .name = "shm",
        .submit = shm_submit,
        .cancel = shm_cancel,
        .progress = shm_progress,
};

int transport_shm_new(TransportSet *ts, Transport **ret)
{
        Transport *t;

        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->ops = &shm_ops;
        t->set = ts;
        *ret = t;
        return 0;
}
