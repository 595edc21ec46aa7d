/* SPDX-License-Identifier: MIT */
/* libkvdist introspection: the daemon's state as JSON and its metrics, for kvdistctl. */
#include <string.h>

#include "client-lib/client.h"

static int daemon_status(kvd_client *c, char **ret_json, Error *err)
{
        Kvdist__V1__DaemonStatus req = KVDIST__V1__DAEMON_STATUS__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        const char *json;
        char *copy;
        int r;

        if (!ret_json)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_json is NULL");

        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS, &req.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, &reply, NULL, err);
        if (r < 0)
                return r;

        json = ((const Kvdist__V1__DaemonStatusReply *)reply)->json;
        copy = strdup(json ?: "");
        if (!copy)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "out of memory");
        *ret_json = copy;
        return KVD_OK;
}

_public_ int kvd_daemon_status(kvd_client *client, char **ret_json)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = daemon_status(client, ret_json, &err);
        return client_return(client, &err, r);
}

static int daemon_metrics(kvd_client *c, char **ret_text, Error *err)
{
        Kvdist__V1__DaemonMetrics req = KVDIST__V1__DAEMON_METRICS__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        const char *text;
        char *copy;
        int r;

        if (!ret_text)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_text is NULL");

        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_DAEMON_METRICS, &req.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, &reply, NULL, err);
        if (r < 0)
                return r;

        text = ((const Kvdist__V1__DaemonMetricsReply *)reply)->text;
        copy = strdup(text ?: "");
        if (!copy)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "out of memory");
        *ret_text = copy;
        return KVD_OK;
}

_public_ int kvd_daemon_metrics(kvd_client *client, char **ret_text)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = daemon_metrics(client, ret_text, &err);
        return client_return(client, &err, r);
}
