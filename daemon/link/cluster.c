/* SPDX-License-Identifier: MIT */
/* Cluster: an attached inference worker with its regions, caches and links. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/link/link-events.h"
#include "daemon/link/link-request.h"
#include "daemon/link/link.h"
#include "common/log.h"
#include "daemon/link/notify.h"
#include "daemon/link/peer.h"
#include "daemon/memory/pool.h"
#include "daemon/memory/region.h"
#include "common/status.h"

int cluster_new(LinkRoot *root, const struct ucred *cred, uint64_t id, ClusterRole role,
                int32_t device_id, uint32_t sync_kv_timeout_ms, Cluster **ret)
{
        Cluster *c;

        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->root = root;
        c->id = id;
        c->role = role;
        c->device_id = device_id;
        c->sync_kv_timeout_ms = sync_kv_timeout_ms;
        if (cred) {
                c->pid = cred->pid;
                c->uid = cred->uid;
        }
        clist_init(&c->regions);
        cache_table_init(&c->caches);
        clist_init(&c->links);
        clist_init(&c->links_in);
        clist_init(&c->inlinks);
        clist_init(&c->link_requests);
        clist_init(&c->notifies);
        c->notify_fd = -1;
        clist_init(&c->transfers);
        clist_link_tail(&root->clusters, &c->link_daemon);
        root->n_clusters++;
        *ret = c;
        return 0;
}

int cluster_set_user(Cluster *c, User *u, Error *err)
{
        int r;

        assert(!c->user);
        r = user_charge(u, USER_SLOT_CLUSTERS, 1, err);
        if (r < 0)
                return r;
        c->user = user_ref(u);
        return 0;
}

void cluster_release_cache(Cluster *c, Cache *cache)
{
        memory_release_cache(c->root->memory, cache);
}

Cluster *cluster_free(Cluster *c)
{
        InLink *il, *iltmp;
        Link *l, *ltmp;
        Cache *cache, *ctmp;
        Region *r, *rtmp;

        if (!c)
                return NULL;

        /* The layers above first (domain/ registers before transfer/): members of the
         * cluster's domains elsewhere hear it while the links are still up, and the transfers
         * the cluster asked for fail. */
        hook_list_emit(&c->root->events, LinkEvents, cluster_gone, c);
        link_requests_abort(c);
        /* Peers hear it once per cluster, not once per link. */
        link_tell_cluster_gone(c);
        CLIST_FOREACH_SAFE (l, ltmp, &c->links, link_local)
                link_free_full(l, STATUS_PEER_LOST, false);
        CLIST_FOREACH_SAFE (il, iltmp, &c->inlinks, link_cluster)
                link_inlink_free(il, STATUS_PEER_LOST, "the cluster linked to detached");
        /* Links others made to us stay (down) until their owners unlink or re-link. */
        CLIST_FOREACH_SAFE (l, ltmp, &c->links_in, link_remote)
                link_set_state(l, LINK_DOWN, STATUS_PEER_LOST);

        CLIST_FOREACH_SAFE (cache, ctmp, &c->caches.caches, link_table) {
                Cache *dead = NULL;

                (void)cache_table_remove(&c->caches, cache->id, &dead, NULL);
                cluster_release_cache(c, dead);
        }
        cache_table_deinit(&c->caches);

        CLIST_FOREACH_SAFE (r, rtmp, &c->regions, link_owner)
                region_release(r);
        user_uncharge(c->user, USER_SLOT_REGIONS, c->n_regions);
        user_uncharge(c->user, USER_SLOT_REGION_BYTES, c->region_bytes);
        user_uncharge(c->user, USER_SLOT_CLUSTERS, 1);
        c->user = user_unref(c->user);

        notify_clear(c);
        (void)cluster_set_listen(c, NULL, NULL);
        log_fields(LOG_INFO, 0, LOG_CLUSTER(c->id), "cluster %" PRIu64 " (pid %d): detached", c->id,
                   (int)c->pid);
        clist_unlink(&c->link_daemon);
        c->root->n_clusters--;
        link_root_changed(c->root);
        free(c);
        return NULL;
}

/* The listener of a cluster of @root other than @self that @address would reach, or NULL. */
static Cluster *cluster_listening_at(LinkRoot *root, const Cluster *self, const char *address)
{
        Cluster *o;

        CLIST_FOREACH (o, &root->clusters, link_daemon)
                if (o != self && peer_listener_covers(o->listener, address))
                        return o;
        return NULL;
}

int cluster_set_listen(Cluster *c, const char *listen_ip_info, Error *err)
{
        LinkRoot *root = c->root;
        _cleanup_free_ char *address = NULL;
        char canon[SOCKADDR_STR_MAX];
        struct sockaddr_storage sa;
        PeerListener *l = NULL;
        socklen_t len;
        Cluster *o;
        int r;

        if (!listen_ip_info || !listen_ip_info[0]) {
                if (c->listen_ip_info)
                        log_fields(LOG_INFO, 0, LOG_CLUSTER(c->id),
                                   "cluster %" PRIu64 ": no longer reachable at %s", c->id,
                                   c->listen_ip_info);
                c->listener = peer_listener_free(c->listener);
                free(c->listen_ip_info);
                c->listen_ip_info = NULL;
                return 0;
        }
        if (sockaddr_parse_listen(listen_ip_info, &sa, &len) < 0 ||
            sockaddr_format((struct sockaddr *)&sa, len, canon, sizeof(canon)) < 0)
                return error_set(err, STATUS_PARAM_INVALID,
                                 "listen_ip_info \"%.64s\" is not \"ip:port\" or \"[ipv6]:port\" "
                                 "(numeric, with a port)",
                                 listen_ip_info);
        /* Where it listens already (switch_role keeping its port): nothing to do. */
        if (c->listener && peer_listener_covers(c->listener, canon))
                return 0;
        if (!link_root_listens_at(root, canon)) {
                o = cluster_listening_at(root, c, canon);
                if (o)
                        return error_set(err, STATUS_LINK_FAILED,
                                         "listen_ip_info %s: cluster %" PRIu64 " listens there "
                                         "already; each cluster needs a port of its own",
                                         canon, o->id);
                r = peer_listener_open(root, canon, &l);
                if (r < 0)
                        return error_set(
                                err, r == -ENOMEM ? STATUS_OUT_OF_MEMORY : STATUS_LINK_FAILED,
                                "listen_ip_info %s: cannot listen there: %s", canon, strerror(-r));
                (void)snprintf(canon, sizeof(canon), "%s", peer_listener_address(l));
        }
        address = strdup(canon);
        if (!address) {
                peer_listener_free(l);
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        }
        peer_listener_free(c->listener);
        c->listener = l;
        free(c->listen_ip_info);
        c->listen_ip_info = TAKE_PTR(address);
        log_fields(LOG_INFO, 0, LOG_CLUSTER(c->id), "cluster %" PRIu64 ": reachable at %s%s", c->id,
                   c->listen_ip_info, l ? "" : " (a peer listener of the daemon's own)");
        if (l && !root->cluster_key)
                log_warning("no cluster_key_file: any host that reaches %s can act as a peer "
                            "daemon",
                            c->listen_ip_info);
        return 0;
}

bool cluster_accepts_links(const Cluster *c)
{
        return c->listen_ip_info || *c->root->options.client_clusters_accept_links;
}

const char *cluster_role_to_string(ClusterRole role)
{
        switch (role) {
        case CLUSTER_ROLE_PROMPT:
                return "prompt";
        case CLUSTER_ROLE_DECODER:
                return "decoder";
        case CLUSTER_ROLE_MIX:
                return "mix";
        }
        return "unknown";
}

Region *cluster_find_region(Cluster *c, uint64_t region_id)
{
        Region *r;

        CLIST_FOREACH (r, &c->regions, link_owner)
                if (r->id == region_id)
                        return r;
        return NULL;
}
