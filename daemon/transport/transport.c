/* SPDX-License-Identifier: MIT */
/* Transport: the generic wrappers over a transport's ops table. */
#include <errno.h>
#include <stdlib.h>

#include "daemon/transport/transport.h"

int transport_submit(Transport *t, Transfer *x)
{
        if (!t->ops->submit)
                return -EOPNOTSUPP;
        return t->ops->submit(t, x);
}

int transport_progress(Transport *t, const Transfer *x, uint64_t *ret)
{
        if (!t || !t->ops->progress)
                return -EOPNOTSUPP;
        return t->ops->progress(t, x, ret);
}

void transport_cancel(Transport *t, Transfer *x)
{
        if (t->ops->cancel)
                t->ops->cancel(t, x);
}

Transport *transport_free(Transport *t)
{
        if (!t)
                return NULL;
        if (t->ops->destroy)
                t->ops->destroy(t);
        else
                free(t);
        return NULL;
}

const char *transport_name(const Transport *t)
{
        return t ? t->ops->name : "none";
}
