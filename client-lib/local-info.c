/* SPDX-License-Identifier: MIT */
/*
 * libkvdist local info: a cluster as one printable line another engine can ship in its request
 * metadata ("kvdist1;compat=...;cluster=...;role=...;addr=..."), links made from such a line, and
 * transfers that link first.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client-lib/client.h"

#define INFO_MAGIC "kvdist1"

/* What a line says. */
typedef struct RemoteInfo {
        uint64_t cluster_id;
        kvd_role role;
        char addr[KVD_LOCAL_INFO_MAX]; /* "" for a client cluster */
} RemoteInfo;

static const char *const role_names[] = {
        [KVD_ROLE_PROMPT] = "prompt",
        [KVD_ROLE_DECODER] = "decoder",
        [KVD_ROLE_MIX] = "mix",
};

/*
 * What two sides must share to talk: the wire protocol (client <-> daemon <-> daemon) and the
 * ABI major version. FNV-1a over their description.
 */
static uint32_t compat_hash(void)
{
        char text[64];
        uint32_t h = 2166136261u;

        (void)snprintf(text, sizeof(text), "wire %u abi %u", CLIENT_PROTOCOL_VERSION,
                       KVDIST_VERSION_MAJOR);
        for (const char *p = text; *p; p++) {
                h ^= (uint8_t)*p;
                h *= 16777619u;
        }
        return h;
}

static int role_parse(const char *s, size_t len, kvd_role *ret)
{
        for (size_t r = KVD_ROLE_PROMPT; r <= KVD_ROLE_MIX; r++)
                if (strlen(role_names[r]) == len && strncmp(s, role_names[r], len) == 0) {
                        *ret = (kvd_role)r;
                        return 0;
                }
        return -EINVAL;
}

/* Parses @s strictly: every field once, in order, nothing else. */
static int remote_info_parse(const char *s, RemoteInfo *ret, Error *err)
{
        const char *p = s, *field;
        unsigned long long id;
        unsigned compat;
        size_t len;
        int n = 0;

        *ret = (RemoteInfo){};
        if (!s)
                return error_set(err, KVD_E_PARAM_INVALID, "remote_info is NULL");
        if (strnlen(s, KVD_LOCAL_INFO_MAX) >= KVD_LOCAL_INFO_MAX)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "remote_info is longer than KVD_LOCAL_INFO_MAX (%d)",
                                 KVD_LOCAL_INFO_MAX);
        if (strncmp(p, INFO_MAGIC ";compat=", strlen(INFO_MAGIC ";compat=")) != 0)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "remote_info \"%s\" is not what kvd_local_info() writes "
                                 "(it starts with \"" INFO_MAGIC ";compat=\")",
                                 s);
        p += strlen(INFO_MAGIC ";compat=");
        if (sscanf(p, "%8x%n", &compat, &n) != 1 || n != 8 || p[n] != ';')
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "remote_info \"%s\": compat is not 8 hex digits", s);
        if (compat != compat_hash())
                return error_set(err, KVD_E_PROTOCOL_MISMATCH,
                                 "remote_info \"%s\" comes from a kvdist that speaks another "
                                 "protocol (compat %08x, ours %08x)",
                                 s, compat, compat_hash());
        p += n + 1;
        if (strncmp(p, "cluster=", 8) != 0 || sscanf(p + 8, "%20llu%n", &id, &n) != 1 ||
            p[8] == '-' || p[8] == '+' || p[8 + n] != ';')
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "remote_info \"%s\": no cluster=<id> after compat", s);
        ret->cluster_id = id;
        p += 8 + n + 1;
        if (strncmp(p, "role=", 5) != 0)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "remote_info \"%s\": no role= after the cluster", s);
        field = p + 5;
        len = strcspn(field, ";");
        if (role_parse(field, len, &ret->role) < 0)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "remote_info \"%s\": role is not prompt, decoder or mix", s);
        p = field + len;
        if (*p == '\0')
                return KVD_OK; /* a client cluster: no address */
        if (strncmp(p, ";addr=", 6) != 0 || p[6] == '\0' || strchr(p + 6, ';'))
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "remote_info \"%s\": what follows the role is not ;addr=<ip:port>",
                                 s);
        (void)snprintf(ret->addr, sizeof(ret->addr), "%s", p + 6);
        return KVD_OK;
}

_public_ int kvd_local_info(kvd_client *client, char **ret_info)
{
        Kvdist__V1__LocalInfo m = KVDIST__V1__LOCAL_INFO__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        const Kvdist__V1__LocalInfoReply *li;
        Error err = ERROR_INIT;
        char *s = NULL;
        int r;

        if (!client)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "client is NULL"));
        if (!ret_info)
                return client_return(client, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "ret_info is NULL"));
        r = conn_call(client, KVDIST__V1__MSG_TYPE__MSG_LOCAL_INFO, &m.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, &reply, NULL, &err);
        if (r < 0)
                return client_return(client, &err, r);
        li = (const Kvdist__V1__LocalInfoReply *)reply;
        if (li->role < KVDIST__V1__ROLE__ROLE_PROMPT || li->role > KVDIST__V1__ROLE__ROLE_MIX)
                return client_return(
                        client, &err,
                        error_set(&err, KVD_E_FAILED, "kvdistd answered role %d", (int)li->role));
        if (asprintf(&s, INFO_MAGIC ";compat=%08x;cluster=%" PRIu64 ";role=%s%s%s", compat_hash(),
                     li->cluster_id, role_names[li->role], li->listen_ip_info[0] ? ";addr=" : "",
                     li->listen_ip_info) < 0)
                return client_return(client, &err,
                                     error_set(&err, KVD_E_OUT_OF_MEMORY, "out of memory"));
        if (strlen(s) >= KVD_LOCAL_INFO_MAX) {
                free(s);
                return client_return(client, &err,
                                     error_set(&err, KVD_E_FAILED,
                                               "the local info would be longer than "
                                               "KVD_LOCAL_INFO_MAX"));
        }
        *ret_info = s;
        return KVD_OK;
}

/* Links @c to what @ri describes, within @timeout_ms; a client cluster refuses. */
static int link_remote_info(kvd_client *c, const RemoteInfo *ri, const char *text,
                            int32_t timeout_ms, Error *err)
{
        kvd_cluster_info info = {ri->cluster_id, ri->role, ri->addr, NULL};
        int r;

        if (!ri->addr[0])
                return error_set(err, KVD_E_LINK_FAILED,
                                 "cluster %" PRIu64 " (\"%s\") is a client: it accepts no links; "
                                 "link from it instead",
                                 ri->cluster_id, text);
        r = kvd_link_clusters(c, &info, 1, timeout_ms, NULL);
        if (r < 0)
                error_set(err, r, "%s", kvd_last_error(c));
        return r;
}

_public_ int kvd_link_remote(kvd_client *client, const char *remote_info, int32_t timeout_ms)
{
        Error err = ERROR_INIT;
        RemoteInfo ri;
        int r;

        if (!client)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "client is NULL"));
        r = remote_info_parse(remote_info, &ri, &err);
        if (r == KVD_OK)
                r = link_remote_info(client, &ri, remote_info, timeout_ms, &err);
        return client_return(client, &err, r);
}

int transfer_link_first(kvd_client *c, const char *remote_info, uint64_t cluster_id,
                        uint32_t *timeout_ms, const char *what, Error *err)
{
        usec_t start = now_usec(CLOCK_MONOTONIC), spent;
        RemoteInfo ri;
        int r;

        r = remote_info_parse(remote_info, &ri, err);
        if (r < 0)
                return r;
        if (ri.cluster_id != cluster_id)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "%sremote_info names cluster %" PRIu64
                                 ", the transfer's key cluster %" PRIu64,
                                 what, ri.cluster_id, cluster_id);
        r = kvd_check_link_status(c, cluster_id);
        if (r != KVD_E_NOT_YET_LINK)
                /* Linked (a link that is down fails the transfer as it would anyway). */
                return KVD_OK;
        r = link_remote_info(c, &ri, remote_info, (int32_t)MIN(*timeout_ms, (uint32_t)INT32_MAX),
                             err);
        /* Another thread of ours may have linked meanwhile. */
        if (r < 0 && r != KVD_E_ALREADY_LINK && r != KVD_E_PROCESSING_LINK)
                return r;
        if (r == KVD_E_PROCESSING_LINK)
                return error_set(err, r, "%sa link to cluster %" PRIu64 " is being set up: retry",
                                 what, cluster_id);
        error_clear(err);
        spent = (now_usec(CLOCK_MONOTONIC) - start) / USEC_PER_MSEC;
        *timeout_ms = spent >= *timeout_ms ? 1 : *timeout_ms - (uint32_t)spent;
        return KVD_OK;
}
