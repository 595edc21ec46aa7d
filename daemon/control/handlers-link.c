/* SPDX-License-Identifier: MIT */
/* Handlers: link_clusters, unlink_clusters, check_link_status, switch_role. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <kvdist/kvdist.h>

#include "cluster.h"
#include "conn.h"
#include "daemon.h"
#include "dispatch.h"
#include "kvdist.pb-c.h"
#include "link.h"
#include "log.h"

/* Checks the cluster list of a (un)link request. */
static int link_check_list(size_t n, Error *err)
{
        if (n == 0)
                return error_set(err, KVD_E_PARAM_INVALID, "no clusters given");
        if (n > KVD_MAX_LINK_CLUSTERS)
                return error_set(err, KVD_E_CLUSTER_NUM_EXCEED_LIMIT,
                                 "%zu clusters in one call, at most %d", n,
                                 KVD_MAX_LINK_CLUSTERS);
        return 0;
}

/* Links @c to one remote cluster; returns a status and fills @err on failure. */
static int link_one(Cluster *c, const Kvdist__V1__ClusterInfo *info, Error *err)
{
        Daemon *d = c->daemon;
        Cluster *remote;
        Link *l;
        int r;

        if (info->remote_cluster_id == c->id)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "cluster %" PRIu64 " cannot link to itself", c->id);
        l = link_find(c, info->remote_cluster_id);
        if (l && l->state == LINK_UP)
                return error_set(err, KVD_E_ALREADY_LINK, "cluster %" PRIu64 " is linked to %"
                                 PRIu64 " already (link %" PRIu64 ")", c->id,
                                 info->remote_cluster_id, l->id);
        remote = daemon_find_cluster(d, info->remote_cluster_id);
        if (!remote) {
                if (info->remote_ip_info && info->remote_ip_info[0])
                        return error_set(err, KVD_E_LINK_FAILED,
                                         "cluster %" PRIu64 " at %s is not attached to this "
                                         "daemon, and links across nodes are not available in "
                                         "this build", info->remote_cluster_id,
                                         info->remote_ip_info);
                return error_set(err, KVD_E_LINK_FAILED,
                                 "no cluster %" PRIu64 " is attached to this daemon",
                                 info->remote_cluster_id);
        }
        /* A link whose remote end went away is replaced by the new one. */
        if (l)
                link_free(l, KVD_E_PEER_LOST);
        r = link_new_local(d, c, remote, d->shm, &l);
        if (r < 0)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "cannot create the link");
        return KVD_OK;
}

static int unlink_one(Cluster *c, const Kvdist__V1__ClusterInfo *info, bool force, Error *err)
{
        Link *l;

        l = link_find(c, info->remote_cluster_id);
        if (!l)
                return error_set(err, KVD_E_NOT_YET_LINK,
                                 "cluster %" PRIu64 " has no link to %" PRIu64, c->id,
                                 info->remote_cluster_id);
        if (l->n_inflight > 0 && !force)
                return error_set(err, KVD_E_LINK_BUSY,
                                 "link %" PRIu64 " has %u transfers in flight; wait for them or "
                                 "unlink with force", l->id, l->n_inflight);
        link_free(l, KVD_E_NOT_YET_LINK);
        return KVD_OK;
}

/* The reply of (un)link_clusters: one status per cluster, the first failure overall. */
static int link_reply(Request *req, const int32_t *rets, size_t n, const Error *first)
{
        Kvdist__V1__LinkClustersReply reply = KVDIST__V1__LINK_CLUSTERS_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;

        /* LinkClustersReply and UnlinkClustersReply are the same message on the wire. */
        static_assert(sizeof(Kvdist__V1__LinkClustersReply) ==
                      sizeof(Kvdist__V1__UnlinkClustersReply), "reply layouts differ");
        status.code = first->code;
        status.detail = (char *)first->msg;
        reply.status = &status;
        reply.rets = (int32_t *)rets;
        reply.n_rets = n;
        return request_reply(req, &reply.base, -1);
}

int handle_link_clusters(Request *req, Error *err)
{
        const Kvdist__V1__LinkClusters *m = (const Kvdist__V1__LinkClusters *)req->msg;
        Cluster *c = req->conn->cluster;
        int32_t rets[KVD_MAX_LINK_CLUSTERS];
        Error first = ERROR_INIT;
        int r;

        r = link_check_list(m->n_clusters, err);
        if (r < 0)
                return r;
        for (size_t i = 0; i < m->n_clusters; i++) {
                Error e = ERROR_INIT;

                rets[i] = link_one(c, m->clusters[i], &e);
                if (rets[i] != KVD_OK) {
                        log_fields(LOG_INFO, 0, LOG_CLUSTER(c->id),
                                   "cluster %" PRIu64 ": link to %" PRIu64 " failed: %s", c->id,
                                   m->clusters[i]->remote_cluster_id, e.msg);
                        error_set(&first, e.code, "clusters[%zu]: %s", i, e.msg);
                }
        }
        return link_reply(req, rets, m->n_clusters, &first), 0;
}

int handle_unlink_clusters(Request *req, Error *err)
{
        const Kvdist__V1__UnlinkClusters *m = (const Kvdist__V1__UnlinkClusters *)req->msg;
        Cluster *c = req->conn->cluster;
        int32_t rets[KVD_MAX_LINK_CLUSTERS];
        Error first = ERROR_INIT;
        int r;

        r = link_check_list(m->n_clusters, err);
        if (r < 0)
                return r;
        for (size_t i = 0; i < m->n_clusters; i++) {
                Error e = ERROR_INIT;

                rets[i] = unlink_one(c, m->clusters[i], m->force, &e);
                if (rets[i] != KVD_OK)
                        error_set(&first, e.code, "clusters[%zu]: %s", i, e.msg);
        }
        return link_reply(req, rets, m->n_clusters, &first), 0;
}

int handle_check_link_status(Request *req, Error *err)
{
        const Kvdist__V1__CheckLinkStatus *m = (const Kvdist__V1__CheckLinkStatus *)req->msg;
        Cluster *c = req->conn->cluster;
        Link *l;

        l = link_find(c, m->remote_cluster_id);
        if (!l)
                return error_set(err, KVD_E_NOT_YET_LINK, "cluster %" PRIu64 " has no link to %"
                                 PRIu64, c->id, m->remote_cluster_id);
        if (l->state != LINK_UP)
                return error_set(err, KVD_E_PEER_LOST, "link %" PRIu64 " to cluster %" PRIu64
                                 " is down: the remote cluster went away; unlink or re-link",
                                 l->id, m->remote_cluster_id);
        return request_reply_ok(req), 0;
}

int handle_switch_role(Request *req, Error *err)
{
        const Kvdist__V1__SwitchRole *m = (const Kvdist__V1__SwitchRole *)req->msg;
        Cluster *c = req->conn->cluster;
        char *listen = NULL;

        if ((int)m->role < CLUSTER_ROLE_PROMPT || (int)m->role > CLUSTER_ROLE_MIX)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "role %d is not prompt (1), decoder (2) or mix (3)", m->role);
        if (c->n_links > 0 || c->n_links_in > 0)
                return error_set(err, KVD_E_EXIST_LINK,
                                 "cluster %" PRIu64 " has %u links; unlink them first", c->id,
                                 c->n_links + c->n_links_in);
        if (m->listen_ip_info && m->listen_ip_info[0]) {
                listen = strdup(m->listen_ip_info);
                if (!listen)
                        return error_set(err, KVD_E_OUT_OF_MEMORY, "out of memory");
        }
        free(c->listen_ip_info);
        c->listen_ip_info = listen;
        c->role = (ClusterRole)m->role;
        log_fields(LOG_INFO, 0, LOG_CLUSTER(c->id), "cluster %" PRIu64 ": role is now %s", c->id,
                   cluster_role_to_string(c->role));
        return request_reply_ok(req), 0;
}
