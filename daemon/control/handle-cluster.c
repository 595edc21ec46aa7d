/* SPDX-License-Identifier: MIT */
/* Handlers: attaching and detaching a cluster, its notifications, and the daemon's status. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/link/cluster.h"
#include "daemon/control/conn.h"
#include "daemon/control/control-root.h"
#include "daemon/control/dispatch.h"
#include "daemon/control/handle-notify.h"
#include "daemon/domain/domain.h"
#include "daemon/link/notify.h"
#include "proto/kvdist.pb-c.h"
#include "common/log.h"
#include "common/status.h"

/* Lists the device map's ids into @buf for an error message. */
static const char *device_ids_to_string(const TransportSet *ts, char *buf, size_t size)
{
        size_t n = 0;

        buf[0] = '\0';
        for (size_t i = 0; i < ts->n_devices && n < size; i++)
                n += (size_t)snprintf(buf + n, size - n, "%s%" PRId32, i ? ", " : "",
                                      ts->devices[i].device_id);
        return buf;
}

int handle_client_init(Request *req, Error *err)
{
        const Kvdist__V1__ClientInit *m = (const Kvdist__V1__ClientInit *)req->msg;
        Kvdist__V1__ClientInitReply reply = KVDIST__V1__CLIENT_INIT_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        Conn *conn = req->conn;
        ControlRoot *root = conn->root;
        const TransportSet *ts = root->transports;
        const Limits *lim = root->options.limits;
        uint32_t timeout;
        Cluster *c;
        char ids[128];
        int r;

        if ((int)m->role < CLUSTER_ROLE_PROMPT || (int)m->role > CLUSTER_ROLE_MIX)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "role %d is not prompt (1), decoder (2) or mix (3)", m->role);
        if (m->device_id < 0)
                return error_set(err, STATUS_PARAM_INVALID, "device_id %" PRId32 " is negative",
                                 m->device_id);
        if (ts->n_devices > 0 &&
            !transport_config_find_device(ts->devices, ts->n_devices, m->device_id))
                return error_set(err, STATUS_PARAM_INVALID,
                                 "device_id %" PRId32 " is not in the daemon's device map (%s)",
                                 m->device_id, device_ids_to_string(ts, ids, sizeof(ids)));
        if (m->sync_kv_timeout_ms > INT32_MAX)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "sync_kv_timeout_ms %" PRIu32 " does not fit int32",
                                 m->sync_kv_timeout_ms);
        if (link_root_find_cluster(root->link, m->cluster_id))
                return error_set(err, STATUS_CLUSTER_EXISTS,
                                 "cluster %" PRIu64 " is attached to this daemon already",
                                 m->cluster_id);
        if (root->link->n_clusters >= lim->max_clients)
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "uid %u refused: the daemon serves %u clusters already "
                                 "(limits.max_clients)",
                                 (unsigned)conn->cred.uid, root->link->n_clusters);
        if (root->stopping)
                return error_set(err, STATUS_DAEMON_UNAVAILABLE, "kvdistd is stopping");
        if (conn->reserved) {
                log_notice("connection %" PRIu64 " (pid %d uid %u): refused a cluster on "
                           "limits.reserved_connections",
                           conn->id, (int)conn->cred.pid, (unsigned)conn->cred.uid);
                return error_set(err, STATUS_LIMIT_EXCEEDED,
                                 "uid %u refused: this connection came in on "
                                 "limits.reserved_connections, which serve read-only requests "
                                 "only (kvdistd had twice limits.max_clients connections open)",
                                 (unsigned)conn->cred.uid);
        }
        r = user_check(conn->user, USER_SLOT_CLUSTERS, 1, err);
        if (r < 0)
                return r;

        timeout = m->sync_kv_timeout_ms ? m->sync_kv_timeout_ms : *root->options.sync_kv_timeout_ms;
        r = cluster_new(root->link, &conn->cred, m->cluster_id, (ClusterRole)m->role, m->device_id,
                        timeout, &c);
        if (r < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "cannot attach the cluster");
        /* With listen_ip_info the cluster is a server that others link to; without, a client. */
        r = cluster_set_user(c, conn->user, err);
        if (r >= 0)
                r = cluster_set_listen(c, m->listen_ip_info, err);
        if (r >= 0)
                r = domain_cluster_attach(root->domains, c, m->local_comm_res, err);
        if (r < 0) {
                cluster_free(c);
                return r;
        }
        conn->cluster = c;
        conn_set_state(conn, CONN_CLUSTER);
        log_fields(LOG_INFO, 0, LOG_CLUSTER(c->id),
                   "cluster %" PRIu64 " (pid %d uid %u): attached as %s on device %" PRId32
                   ", sync_kv_timeout %" PRIu32 " ms, %s%s",
                   c->id, (int)c->pid, (unsigned)c->uid, cluster_role_to_string(c->role),
                   c->device_id, timeout, c->listen_ip_info ? "a server at " : "a client",
                   c->listen_ip_info ?: "");
        control_root_changed(root);

        reply.status = &status;
        reply.sync_kv_timeout_ms = timeout;
        return conn_request_reply(req, &reply.base, -1), 0;
}

int handle_client_finalize(Request *req, Error *err)
{
        Conn *conn = req->conn;
        Cluster *c = TAKE_PTR(conn->cluster);

        /* Transfers the cluster asked for fail; their answers follow once their transports have
         * let go of the memory. The connection stays for read-only use. */
        conn_set_state(conn, CONN_READY);
        cluster_free(c);
        return conn_request_reply_ok(req), 0;
}

int handle_daemon_status(Request *req, Error *err)
{
        ControlRoot *root = req->conn->root;
        Kvdist__V1__DaemonStatusReply reply = KVDIST__V1__DAEMON_STATUS_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        _cleanup_free_ char *json = NULL;

        if (root->status_json(root->userdata, &json) < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "cannot build the status document");
        reply.status = &status;
        reply.json = json;
        return conn_request_reply(req, &reply.base, -1), 0;
}

int handle_notify_fd(Request *req, Error *err)
{
        return notify_handle_fd(req->conn->cluster, &req->done, err);
}

int handle_get_notifies(Request *req, Error *err)
{
        const Kvdist__V1__GetNotifies *m = (const Kvdist__V1__GetNotifies *)req->msg;

        return handle_notify_get(req->conn->cluster, m->max, &req->done, err);
}
