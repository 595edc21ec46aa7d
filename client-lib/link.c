/* SPDX-License-Identifier: MIT */
/* libkvdist links: linking to and unlinking from remote clusters, link status, role changes. */
#include <stdlib.h>

#include "client-lib/client.h"

#define LINK_DEFAULT_TIMEOUT_MS 3000

static int link_or_unlink(kvd_client *c, const kvd_cluster_info *clusters, size_t n,
                          int32_t timeout_ms, bool unlink, bool force, int *rets, Error *err)
{
        Kvdist__V1__ClusterInfo infos[KVD_MAX_LINK_CLUSTERS], *ptrs[KVD_MAX_LINK_CLUSTERS];
        Kvdist__V1__LinkClusters link = KVDIST__V1__LINK_CLUSTERS__INIT;
        Kvdist__V1__UnlinkClusters unl = KVDIST__V1__UNLINK_CLUSTERS__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        const int32_t *reply_rets = NULL;
        size_t n_reply_rets = 0;
        uint32_t timeout;
        int r;

        if (n == 0)
                return error_set(err, KVD_E_PARAM_INVALID, "no clusters given");
        if (n > KVD_MAX_LINK_CLUSTERS) {
                r = error_set(err, KVD_E_CLUSTER_NUM_EXCEED_LIMIT,
                              "%zu clusters given, at most %d per call", n, KVD_MAX_LINK_CLUSTERS);
                goto fail;
        }
        if (!clusters) {
                r = error_set(err, KVD_E_PARAM_INVALID, "clusters is NULL");
                goto fail;
        }

        for (size_t i = 0; i < n; i++) {
                if ((int)clusters[i].remote_role < 0 || clusters[i].remote_role > KVD_ROLE_MIX) {
                        r = error_set(err, KVD_E_PARAM_INVALID,
                                      "clusters[%zu].remote_role %d is unknown", i,
                                      (int)clusters[i].remote_role);
                        goto fail;
                }
                kvdist__v1__cluster_info__init(&infos[i]);
                infos[i].remote_cluster_id = clusters[i].remote_cluster_id;
                infos[i].remote_role = (Kvdist__V1__Role)clusters[i].remote_role;
                infos[i].remote_ip_info = (char *)(clusters[i].remote_ip_info ?: "");
                infos[i].local_ip_info = (char *)(clusters[i].local_ip_info ?: "");
                ptrs[i] = &infos[i];
        }

        timeout = timeout_ms <= 0 ? LINK_DEFAULT_TIMEOUT_MS : (uint32_t)timeout_ms;
        if (unlink) {
                unl.n_clusters = n;
                unl.clusters = ptrs;
                unl.timeout_ms = timeout;
                unl.force = force;
                r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_UNLINK_CLUSTERS, &unl.base, NULL, 0,
                              timeout + CLIENT_GRACE_MS, &reply, NULL, err);
                if (reply) {
                        reply_rets = ((const Kvdist__V1__UnlinkClustersReply *)reply)->rets;
                        n_reply_rets = ((const Kvdist__V1__UnlinkClustersReply *)reply)->n_rets;
                }
        } else {
                link.n_clusters = n;
                link.clusters = ptrs;
                link.timeout_ms = timeout;
                r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_LINK_CLUSTERS, &link.base, NULL, 0,
                              timeout + CLIENT_GRACE_MS, &reply, NULL, err);
                if (reply) {
                        reply_rets = ((const Kvdist__V1__LinkClustersReply *)reply)->rets;
                        n_reply_rets = ((const Kvdist__V1__LinkClustersReply *)reply)->n_rets;
                }
        }

        /* A cluster the reply does not mention shares the call's fate. */
        for (size_t i = 0; i < n; i++) {
                int ret = i < n_reply_rets ? reply_rets[i] : r;

                if (ret > 0)
                        ret = KVD_E_FAILED;
                if (rets)
                        rets[i] = ret;
                if (r == KVD_OK && ret < 0)
                        r = error_set(err, ret, "%s cluster %llu failed: %s",
                                      unlink ? "unlinking" : "linking",
                                      (unsigned long long)clusters[i].remote_cluster_id,
                                      kvd_strerror(ret));
        }
        return r;

fail:
        /* Nothing was asked of the daemon: every cluster gets the call's status. */
        if (rets)
                for (size_t i = 0; i < n; i++)
                        rets[i] = r;
        return r;
}

_public_ int kvd_link_clusters(kvd_client *client, const kvd_cluster_info *clusters, size_t n,
                               int32_t timeout_ms, int *rets)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = link_or_unlink(client, clusters, n, timeout_ms, false, false, rets, &err);
        return client_return(client, &err, r);
}

_public_ int kvd_unlink_clusters(kvd_client *client, const kvd_cluster_info *clusters, size_t n,
                                 int32_t timeout_ms, bool force, int *rets)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = link_or_unlink(client, clusters, n, timeout_ms, true, force, rets, &err);
        return client_return(client, &err, r);
}

_public_ int kvd_check_link_status(kvd_client *client, uint64_t remote_cluster_id)
{
        Kvdist__V1__CheckLinkStatus check = KVDIST__V1__CHECK_LINK_STATUS__INIT;
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else {
                check.remote_cluster_id = remote_cluster_id;
                r = conn_call(client, KVDIST__V1__MSG_TYPE__MSG_CHECK_LINK_STATUS, &check.base,
                              NULL, 0, CLIENT_CALL_TIMEOUT_MS, NULL, NULL, &err);
        }
        return client_return(client, &err, r);
}

static int switch_role(kvd_client *c, kvd_role role, const kvd_option *options, size_t n,
                       Error *err)
{
        Kvdist__V1__SwitchRole sw = KVDIST__V1__SWITCH_ROLE__INIT;
        const char *listen_ip_info;
        int r;

        if (role < KVD_ROLE_PROMPT || role > KVD_ROLE_MIX)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "role %d is not KVD_ROLE_PROMPT, KVD_ROLE_DECODER or KVD_ROLE_MIX",
                                 (int)role);
        r = client_parse_listen_ip_info(options, n, &listen_ip_info, err);
        if (r < 0)
                return r;

        sw.role = (Kvdist__V1__Role)role;
        sw.listen_ip_info = (char *)(listen_ip_info ?: "");
        return conn_call(c, KVDIST__V1__MSG_TYPE__MSG_SWITCH_ROLE, &sw.base, NULL, 0,
                         CLIENT_CALL_TIMEOUT_MS, NULL, NULL, err);
}

_public_ int kvd_switch_role(kvd_client *client, kvd_role role, const kvd_option *options,
                             size_t n_options)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                r = error_set(&err, KVD_E_PARAM_INVALID, "client is NULL");
        else
                r = switch_role(client, role, options, n_options, &err);
        return client_return(client, &err, r);
}
