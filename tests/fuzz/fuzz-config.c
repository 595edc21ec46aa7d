/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the daemon's config parser: the input is a JSON document as config_load_string()
 * gets it. A document that loads must leave every value in its documented range; one that does
 * not must leave the config exactly as it was and say why. Built for libFuzzer, or with
 * fuzz-main.c to replay a corpus.
 */

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>

#include "daemon/config.h"
#include "common/macro.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                                   \
        do {                                                                                       \
                if (!(x))                                                                          \
                        abort();                                                                   \
        } while (0)

static bool str_eq_null(const char *a, const char *b)
{
        return a ? b && strcmp(a, b) == 0 : !b;
}

/* Whether @a and @b hold the same settings, lists and device map included. */
static bool config_same(const Config *a, const Config *b)
{
        if (!str_eq_null(a->socket_path, b->socket_path) || a->socket_mode != b->socket_mode ||
            a->memory_size != b->memory_size || a->page_shift != b->page_shift ||
            a->sync_kv_timeout_ms != b->sync_kv_timeout_ms || a->copy_threads != b->copy_threads ||
            a->log_level != b->log_level || !str_eq_null(a->metrics_listen, b->metrics_listen) ||
            memcmp(&a->limits, &b->limits, sizeof(Limits)) != 0 ||
            a->n_allow_uids != b->n_allow_uids || a->n_allow_gids != b->n_allow_gids ||
            a->n_devices != b->n_devices)
                return false;
        if ((a->n_allow_uids &&
             memcmp(a->allow_uids, b->allow_uids, a->n_allow_uids * sizeof(uid_t)) != 0) ||
            (a->n_allow_gids &&
             memcmp(a->allow_gids, b->allow_gids, a->n_allow_gids * sizeof(gid_t)) != 0))
                return false;
        for (size_t i = 0; i < a->n_devices; i++) {
                const DeviceConfig *x = &a->devices[i], *y = &b->devices[i];

                if (x->device_id != y->device_id || x->port != y->port ||
                    x->gid_index != y->gid_index || x->transport != y->transport ||
                    !str_eq_null(x->rdma_device, y->rdma_device) ||
                    !str_eq_null(x->netdev, y->netdev))
                        return false;
        }
        return true;
}

/* The ranges config/README.md promises. */
static void check_ranges(const Config *c)
{
        const Limits *l = &c->limits;

        CHECK(c->socket_path && c->socket_path[0] && strlen(c->socket_path) <= 107);
        CHECK(c->socket_mode <= 0777);
        CHECK(c->memory_size <= (UINT64_C(1) << 40));
        CHECK(c->page_shift >= 12 && c->page_shift <= 30);
        CHECK(c->sync_kv_timeout_ms >= 1 && c->sync_kv_timeout_ms <= INT32_MAX);
        CHECK(c->copy_threads >= 1 && c->copy_threads <= 64);
        CHECK(c->log_level >= LOG_ERR && c->log_level <= LOG_DEBUG);
        CHECK(l->max_clients >= 1 && l->max_clients <= 65536);
        CHECK(l->max_regions_per_client >= 1 && l->max_caches_per_client >= 1 &&
              l->max_keys_per_client >= 1 && l->max_inflight_per_client >= 1 &&
              l->max_blocks_per_transfer >= 1);
        CHECK(l->max_region_size >= 1 && l->max_region_size <= (UINT64_C(1) << 40));
        CHECK(l->max_tensor_addrs >= 1 && l->max_tensor_addrs <= 240);
        CHECK(l->max_frame_size >= 4096 && l->max_frame_size <= (UINT32_C(256) << 20));
        for (size_t i = 0; i < c->n_allow_uids; i++)
                CHECK(c->allow_uids[i] != (uid_t)-1);
        for (size_t i = 0; i < c->n_allow_gids; i++)
                CHECK(c->allow_gids[i] != (gid_t)-1);
        CHECK(c->n_devices <= 1024);
        for (size_t i = 0; i < c->n_devices; i++) {
                const DeviceConfig *d = &c->devices[i];

                CHECK(d->device_id >= 0);
                CHECK(config_find_device(c, d->device_id) == d);
                CHECK(d->port >= 1);
                CHECK(d->gid_index >= -1 && d->gid_index <= 255);
                CHECK(transport_kind_to_string(d->transport));
                CHECK(!d->rdma_device || (d->rdma_device[0] && strlen(d->rdma_device) <= 63));
                CHECK(!d->netdev || (d->netdev[0] && strlen(d->netdev) <= 15));
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_(config_freep) Config *c = NULL, *ref = NULL;
        _cleanup_free_ char *text = NULL, *error = NULL;
        int r;

        /* An exact-size NUL-terminated copy, so that reading past the end is an ASan report. */
        text = malloc(size + 1);
        CHECK(text);
        memcpy(text, data, size);
        text[size] = '\0';

        CHECK(config_new(&c) == 0);
        CHECK(config_new(&ref) == 0);
        r = config_load_string(c, text, &error);
        if (r == 0) {
                check_ranges(c);
        } else {
                CHECK(r == -EINVAL || r == -ENOMEM);
                CHECK(r == -ENOMEM || (error && error[0]));
                CHECK(config_same(c, ref));
        }
        return 0;
}
