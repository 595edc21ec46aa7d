/* SPDX-License-Identifier: MIT */
/*
 * The null transport moves nothing. A device the device map gives "transport": "null" has no
 * working transport: links of its clusters to peer daemons are refused with the reason below
 * (an operator's way to keep a device off the network), while links inside the node still copy.
 *
 * It is also the smallest transport there is, and so the list of what adding one takes: this
 * file, its line in meson.build, its kind in transport-config.h and .c and its entry in
 * transport_set_init(). Nothing outside daemon/transport/ knows it.
 */
#include <errno.h>
#include <stdlib.h>

#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"

static const char null_reason[] = "the null transport moves nothing";

static int null_device_info(Transport *t, int32_t device_id, const char *name,
                            TransportDeviceInfo *ret, const char **ret_reason)
{
        if (ret_reason)
                *ret_reason = null_reason;
        return -ENODEV;
}

static int null_region_register(Transport *t, int32_t device_id, TransportChannel *channel,
                                void *addr, uint64_t len, bool remote_write, TransportRegion *r)
{
        return -ENODEV;
}

static const transport_ops null_ops = {
        .name = "null",
        /* No capabilities; without submit or channel ops the wrappers refuse jobs and
         * channels (-EOPNOTSUPP). */
        .device_info = null_device_info,
        .region_register = null_region_register,
};

int transport_null_new(TransportSet *ts, Transport **ret)
{
        Transport *t;

        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->ops = &null_ops;
        t->set = ts;
        *ret = t;
        return 0;
}
