/* SPDX-License-Identifier: MIT */
/* Config as JSON: the effective configuration, key for key as the config file spells it. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "daemon/config-internal.h"
#include "daemon/config-json.h"
#include "common/log.h"

static void set(json_t *o, const char *key, json_t *v, bool *ok)
{
        if (!v || json_object_set_new(o, key, v) < 0)
                *ok = false;
}

static void set_int_fields(json_t *o, const Config *c, const IntFieldTable *t, bool *ok)
{
        for (size_t i = 0; i < t->n_fields; i++)
                set(o, t->fields[i].name,
                    json_integer((json_int_t)config_int_field_load(c, &t->fields[i])), ok);
}

static json_t *ids_to_json(const uint32_t *ids, size_t n, bool *ok)
{
        json_t *a = json_array();

        for (size_t i = 0; a && i < n; i++)
                if (json_array_append_new(a, json_integer(ids[i])) < 0)
                        *ok = false;
        return a;
}

static json_t *device_to_json(const DeviceConfig *d, bool *ok)
{
        json_t *o = json_object();

        if (!o)
                return NULL;
        set(o, "device_id", json_integer(d->device_id), ok);
        set(o, "transport", json_string(transport_kind_to_string(d->transport) ?: "auto"), ok);
        if (d->rdma_device)
                set(o, "rdma_device", json_string(d->rdma_device), ok);
        set(o, "port", json_integer(d->port), ok);
        set(o, "gid_index", json_integer(d->gid_index), ok);
        if (d->netdev)
                set(o, "netdev", json_string(d->netdev), ok);
        if (d->address)
                set(o, "address", json_string(d->address), ok);
        return o;
}

json_t *config_to_json(const Config *c)
{
        json_t *o = json_object(), *limits = json_object(), *devices = json_array();
        json_t *tcp = json_object(), *rdma = json_object();
        char mode[8];
        bool ok = o && limits && devices && tcp && rdma;

        if (!ok) {
                json_decref(o);
                json_decref(limits);
                json_decref(devices);
                json_decref(tcp);
                json_decref(rdma);
                return NULL;
        }
        (void)snprintf(mode, sizeof(mode), "%04o", c->socket_mode);
        set(o, "socket_path", json_string(c->socket_path ?: ""), &ok);
        set(o, "socket_mode", json_string(mode), &ok);
        set(o, "allow_uids", ids_to_json((const uint32_t *)c->allow_uids, c->n_allow_uids, &ok),
            &ok);
        set(o, "allow_gids", ids_to_json((const uint32_t *)c->allow_gids, c->n_allow_gids, &ok),
            &ok);
        set_int_fields(o, c, &config_top_fields, &ok);
        set(o, "copy_threads", json_integer(c->copy_threads), &ok);
        set(o, "copy_streaming", json_boolean(c->copy_streaming), &ok);
        set(o, "control_nice",
            c->control_nice == CONTROL_NICE_OFF ? json_string("off")
                                                : json_integer(c->control_nice),
            &ok);
        set(o, "log_level", json_string(log_level_to_string(c->log_level) ?: "info"), &ok);
        set(o, "metrics_listen", json_string(c->metrics_listen ?: ""), &ok);
        set(o, "listen_ip_info", json_string(c->listen_ip_info ?: ""), &ok);
        set(o, "cluster_key_file", json_string(c->cluster_key_file ?: ""), &ok);
        set(o, "client_clusters_accept_links", json_boolean(c->client_clusters_accept_links), &ok);
        set_int_fields(tcp, c, &config_tcp_fields, &ok);
        set(tcp, "crc", json_boolean(c->tcp.crc), &ok);
        set(o, "tcp", tcp, &ok);
        set_int_fields(rdma, c, &config_rdma_fields, &ok);
        set(o, "rdma", rdma, &ok);
        for (size_t i = 0; i < c->n_devices; i++)
                if (json_array_append_new(devices, device_to_json(&c->devices[i], &ok)) < 0)
                        ok = false;
        set(o, "devices", devices, &ok);
        set_int_fields(limits, c, &config_limit_fields, &ok);
        {
                json_t *per_user = json_object();

                if (per_user)
                        set_int_fields(per_user, c, &config_per_user_fields, &ok);
                set(limits, "per_user", per_user, &ok);
        }
        set(o, "limits", limits, &ok);
        if (!ok) {
                json_decref(o);
                return NULL;
        }
        return o;
}
