/* SPDX-License-Identifier: MIT */
/* Transport config: the device map's lookups (by device_id, by address) and the names of the
 * transport kinds. */
#include <stdio.h>
#include <string.h>

#include "daemon/transport/transport-config.h"

const DeviceConfig *transport_config_find_device(const DeviceConfig *devices, size_t n_devices,
                                                 int32_t device_id)
{
        for (size_t i = 0; i < n_devices; i++)
                if (devices[i].device_id == device_id)
                        return &devices[i];
        return NULL;
}

const DeviceConfig *transport_config_find_address(const DeviceConfig *devices, size_t n_devices,
                                                  const char *address)
{
        for (size_t i = 0; address && i < n_devices; i++)
                if (devices[i].address && strcmp(devices[i].address, address) == 0)
                        return &devices[i];
        return NULL;
}

const char *transport_kind_to_string(TransportKind k)
{
        static const char *const names[_TRANSPORT_KIND_MAX] = {
                [TRANSPORT_KIND_AUTO] = "auto",
                [TRANSPORT_KIND_TCP] = "tcp",
                [TRANSPORT_KIND_RDMA] = "rdma",
                [TRANSPORT_KIND_NULL] = "null",
        };

        if (k < 0 || k >= _TRANSPORT_KIND_MAX)
                return NULL;
        return names[k];
}

TransportKind transport_kind_from_string(const char *s)
{
        for (int k = 0; k < _TRANSPORT_KIND_MAX; k++)
                if (strcmp(s, transport_kind_to_string(k)) == 0)
                        return k;
        return _TRANSPORT_KIND_INVALID;
}

char *transport_kind_names(char *buf, size_t size)
{
        size_t n = 0;

        buf[0] = '\0';
        for (int k = 0; k < _TRANSPORT_KIND_MAX && n < size; k++) {
                int r = snprintf(buf + n, size - n, "%s\"%s\"", k > 0 ? ", " : "",
                                 transport_kind_to_string(k));

                if (r < 0)
                        break;
                n += (size_t)r;
        }
        return buf;
}
