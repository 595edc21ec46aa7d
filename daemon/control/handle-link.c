/* SPDX-License-Identifier: MIT */
/* Handlers: link_clusters, unlink_clusters, check_link_status, switch_role. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <kvdist/kvdist.h>

#include "daemon/link/cluster.h"
#include "daemon/control/conn.h"
#include "daemon/control/dispatch.h"
#include "proto/kvdist.pb-c.h"
#include "daemon/link/link-request.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "proto/status-wire.h"
#include "common/status.h"

/* Answers a (Un)LinkClusters request: one status per cluster, @first the overall failure. The
 * two replies are the same message on the wire. */
static int link_clusters_reply(Completion *done, const int32_t *rets, size_t n, const Error *first)
{
        Kvdist__V1__LinkClustersReply reply = KVDIST__V1__LINK_CLUSTERS_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        int32_t wire_rets[KVD_MAX_LINK_CLUSTERS];

        assert(n <= KVD_MAX_LINK_CLUSTERS);
        static_assert(sizeof(Kvdist__V1__LinkClustersReply) ==
                              sizeof(Kvdist__V1__UnlinkClustersReply),
                      "reply layouts differ");
        status.code = status_wire_encode(first->code);
        status.detail = (char *)first->msg;
        reply.status = &status;
        for (size_t i = 0; i < n; i++)
                wire_rets[i] = status_wire_encode(rets[i]);
        reply.rets = wire_rets;
        reply.n_rets = n;
        return completion_reply(done, &reply.base, -1);
}

static int unlink_one(Cluster *c, const Kvdist__V1__ClusterInfo *info, bool force, Error *err)
{
        Link *l;

        l = link_find(c, info->remote_cluster_id);
        if (!l) {
                /* The side that was linked to may drop the links made to it (after a fault). */
                if (link_unlink_inbound(c, info->remote_cluster_id, force) > 0)
                        return STATUS_OK;
                return error_set(err, STATUS_NOT_YET_LINK,
                                 "cluster %" PRIu64 " has no link to %" PRIu64, c->id,
                                 info->remote_cluster_id);
        }
        /* Both ways: the other cluster's transfers over it count too. */
        if (l->n_inflight + l->n_served_inflight > 0 && !force)
                return error_set(err, STATUS_LINK_BUSY,
                                 "link %" PRIu64 " has %u transfers in flight; wait for them or "
                                 "unlink with force",
                                 l->id, l->n_inflight + l->n_served_inflight);
        /* With force only this end goes: the peer is not told (LLM-DataDist's rule). */
        link_free_full(l, STATUS_NOT_YET_LINK, !force);
        return STATUS_OK;
}

int handle_link_clusters(Request *req, Error *err)
{
        const Kvdist__V1__LinkClusters *m = (const Kvdist__V1__LinkClusters *)req->msg;
        LinkTarget targets[KVD_MAX_LINK_CLUSTERS];
        int r;

        r = link_check_cluster_list(m->n_clusters, err);
        if (r < 0)
                return r;
        for (size_t i = 0; i < m->n_clusters; i++)
                targets[i] = (LinkTarget){
                        .remote_cluster_id = m->clusters[i]->remote_cluster_id,
                        .remote_ip_info = m->clusters[i]->remote_ip_info,
                };
        return link_request_start(req->conn->cluster, targets, m->n_clusters, m->timeout_ms,
                                  &req->done, link_clusters_reply, err);
}

int handle_unlink_clusters(Request *req, Error *err)
{
        const Kvdist__V1__UnlinkClusters *m = (const Kvdist__V1__UnlinkClusters *)req->msg;
        Cluster *c = req->conn->cluster;
        int32_t rets[KVD_MAX_LINK_CLUSTERS];
        Error first = ERROR_INIT;
        int r;

        r = link_check_cluster_list(m->n_clusters, err);
        if (r < 0)
                return r;
        for (size_t i = 0; i < m->n_clusters; i++) {
                Error e = ERROR_INIT;

                rets[i] = unlink_one(c, m->clusters[i], m->force, &e);
                if (rets[i] != STATUS_OK)
                        error_set(&first, e.code, "clusters[%zu]: %s", i, e.msg);
        }
        return link_clusters_reply(&req->done, rets, m->n_clusters, &first), 0;
}

int handle_check_link_status(Request *req, Error *err)
{
        const Kvdist__V1__CheckLinkStatus *m = (const Kvdist__V1__CheckLinkStatus *)req->msg;
        Cluster *c = req->conn->cluster;
        Link *l;

        l = link_find(c, m->remote_cluster_id);
        /* Links are two-way: one the remote cluster made to this one counts as well. */
        if ((!l || l->state != LINK_UP) && (link_find_in(c, m->remote_cluster_id) ||
                                            link_inlink_find_cluster(c, m->remote_cluster_id)))
                return conn_request_reply_ok(req), 0;
        if (!l)
                return error_set(err, STATUS_NOT_YET_LINK,
                                 "cluster %" PRIu64 " has no link to %" PRIu64, c->id,
                                 m->remote_cluster_id);
        if (l->state != LINK_UP && l->down_status == STATUS_NOT_YET_LINK)
                return error_set(err, STATUS_NOT_YET_LINK,
                                 "link %" PRIu64 " to cluster %" PRIu64 " was unlinked by cluster "
                                 "%" PRIu64 "; unlink or re-link",
                                 l->id, m->remote_cluster_id, m->remote_cluster_id);
        if (l->state != LINK_UP)
                return error_set(err, STATUS_PEER_LOST,
                                 "link %" PRIu64 " to cluster %" PRIu64
                                 " is down: the remote cluster%s went away; unlink or re-link",
                                 l->id, m->remote_cluster_id, l->exposed ? " or its daemon" : "");
        return conn_request_reply_ok(req), 0;
}

int handle_switch_role(Request *req, Error *err)
{
        const Kvdist__V1__SwitchRole *m = (const Kvdist__V1__SwitchRole *)req->msg;
        Cluster *c = req->conn->cluster;
        int r;

        if ((int)m->role < CLUSTER_ROLE_PROMPT || (int)m->role > CLUSTER_ROLE_MIX)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "role %d is not prompt (1), decoder (2) or mix (3)", m->role);
        if (c->n_links > 0 || c->n_links_in > 0 || c->n_inlinks > 0)
                return error_set(err, STATUS_EXIST_LINK,
                                 "cluster %" PRIu64 " has %u links; unlink them first", c->id,
                                 c->n_links + c->n_links_in + c->n_inlinks);
        /* With listen_ip_info it becomes a server there (or moves); without, a client. The role
         * changes only once the listener is where it was asked to be. */
        r = cluster_set_listen(c, m->listen_ip_info, err);
        if (r < 0)
                return r;
        c->role = (ClusterRole)m->role;
        log_fields(LOG_INFO, 0, LOG_CLUSTER(c->id), "cluster %" PRIu64 ": role is now %s, %s%s",
                   c->id, cluster_role_to_string(c->role),
                   c->listen_ip_info ? "a server at " : "a client", c->listen_ip_info ?: "");
        return conn_request_reply_ok(req), 0;
}

int handle_local_info(Request *req, Error *err)
{
        Kvdist__V1__LocalInfoReply reply = KVDIST__V1__LOCAL_INFO_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        const Cluster *c = req->conn->cluster;

        reply.status = &status;
        reply.cluster_id = c->id;
        reply.role = (Kvdist__V1__Role)c->role;
        reply.listen_ip_info = c->listen_ip_info ?: (char *)"";
        return conn_request_reply(req, &reply.base, -1), 0;
}
