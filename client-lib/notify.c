/* SPDX-License-Identifier: MIT */
/* libkvdist push and pull notifications: the eventfd to poll and taking what waits. */
#include <string.h>

#include "client-lib/client.h"

static int notify_fd(kvd_client *c, int *ret_fd, Error *err)
{
        Kvdist__V1__NotifyFd req = KVDIST__V1__NOTIFY_FD__INIT;
        int fd = -1, r;

        if (!ret_fd)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_fd is NULL");
        if (!c->initialized)
                return error_set(err, KVD_E_NOT_INITIALIZED, "the client is not a cluster");
        pthread_mutex_lock(&c->lock);
        fd = c->notify_fd;
        pthread_mutex_unlock(&c->lock);
        if (fd >= 0) {
                *ret_fd = fd;
                return KVD_OK;
        }
        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_NOTIFY_FD, &req.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, NULL, &fd, err);
        if (r < 0)
                return r;
        if (fd < 0)
                return error_set(err, KVD_E_PROTOCOL_MISMATCH, "the daemon sent no eventfd");
        pthread_mutex_lock(&c->lock);
        /* Two threads asking at once: the first fd stays, the second is closed. */
        if (c->notify_fd < 0)
                c->notify_fd = fd;
        else
                safe_close(fd);
        *ret_fd = c->notify_fd;
        pthread_mutex_unlock(&c->lock);
        return KVD_OK;
}

static int get_notifies(kvd_client *c, kvd_notify *out, size_t max, size_t *ret_n, Error *err)
{
        Kvdist__V1__GetNotifies req = KVDIST__V1__GET_NOTIFIES__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        const Kvdist__V1__GetNotifiesReply *m;
        int r;

        if (!ret_n)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_n is NULL");
        if (max > 0 && !out)
                return error_set(err, KVD_E_PARAM_INVALID, "out is NULL but max is %zu", max);
        req.max = max > UINT32_MAX ? UINT32_MAX : (uint32_t)max;
        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_GET_NOTIFIES, &req.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, &reply, NULL, err);
        if (r < 0)
                return r;
        m = (const Kvdist__V1__GetNotifiesReply *)reply;
        if (m->n_notifies > max)
                return error_set(err, KVD_E_PROTOCOL_MISMATCH,
                                 "the daemon sent %zu notifications for %zu places", m->n_notifies,
                                 max);
        for (size_t i = 0; i < m->n_notifies; i++) {
                const Kvdist__V1__Notify *n = m->notifies[i];

                if (n->data.len > KVD_NOTIFY_MAX)
                        return error_set(err, KVD_E_PROTOCOL_MISMATCH,
                                         "a notification of %zu bytes", n->data.len);
                if (n->kind != KVDIST__V1__NOTIFY_KIND__NOTIFY_KIND_PUSH &&
                    n->kind != KVDIST__V1__NOTIFY_KIND__NOTIFY_KIND_PULL)
                        return error_set(err, KVD_E_PROTOCOL_MISMATCH,
                                         "a notification of unknown kind %d", (int)n->kind);
                out[i].src_cluster_id = n->src_cluster_id;
                out[i].len = n->data.len;
                memcpy(out[i].data, n->data.data, n->data.len);
                out[i].kind = n->kind == KVDIST__V1__NOTIFY_KIND__NOTIFY_KIND_PULL
                                      ? KVD_NOTIFY_PULL
                                      : KVD_NOTIFY_PUSH;
        }
        *ret_n = m->n_notifies;
        return KVD_OK;
}

_public_ int kvd_notify_fd(kvd_client *client, int *ret_fd)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = notify_fd(client, ret_fd, &err);
        return client_return(client, &err, r);
}

_public_ int kvd_get_notifies(kvd_client *client, kvd_notify *out, size_t max, size_t *ret_n)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = get_notifies(client, out, max, ret_n, &err);
        return client_return(client, &err, r);
}
