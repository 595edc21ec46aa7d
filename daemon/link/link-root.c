/* SPDX-License-Identifier: MIT */
/* LinkRoot: the link layer's root object (see link-root.h). */

#include <stdlib.h>
#include <string.h>

#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/link/peer-link.h"
#include "daemon/link/peer.h"
#include "daemon/transport/transport-set.h"

void link_root_init(LinkRoot *root)
{
        clist_init(&root->peers);
        clist_init(&root->inlinks);
        clist_init(&root->clusters);
        clist_init(&root->links);
        hook_list_init(&root->events);
        root->peer_ops = &peer_link_ops;
}

void link_root_done(LinkRoot *root)
{
        if (root->cluster_key)
                explicit_bzero(root->cluster_key, root->cluster_key_len);
        free(root->cluster_key);
        root->cluster_key = NULL;
        root->cluster_key_len = 0;
}

void link_root_changed(LinkRoot *root)
{
        if (root->changed)
                root->changed(root->changed_userdata);
}

Cluster *link_root_find_cluster(LinkRoot *root, uint64_t cluster_id)
{
        Cluster *c;

        CLIST_FOREACH (c, &root->clusters, link_daemon)
                if (c->id == cluster_id)
                        return c;
        return NULL;
}

bool link_root_listens_at(const LinkRoot *root, const char *address)
{
        if (peer_listener_covers(root->peer_listener, address))
                return true;
        for (size_t i = 0; i < root->n_device_listeners; i++)
                if (peer_listener_covers(root->device_listeners[i], address))
                        return true;
        return false;
}

const DeviceConfig *link_root_find_device(const LinkRoot *root, int32_t device_id)
{
        return root->transports ? transport_set_find_device(root->transports, device_id) : NULL;
}

const DeviceConfig *link_root_find_device_address(const LinkRoot *root, const char *address)
{
        if (!root->transports)
                return NULL;
        return transport_config_find_address(root->transports->devices, root->transports->n_devices,
                                             address);
}

const char *link_root_peer_address(const LinkRoot *root)
{
        return peer_listener_address(root->peer_listener);
}
