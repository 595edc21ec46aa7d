/* SPDX-License-Identifier: MIT */
/* ControlRoot: the client edge's root object, its counters and its word to the daemon. */
#include "daemon/control/control-root.h"
#include "proto/status-wire.h"

void control_root_init(ControlRoot *root)
{
        *root = (ControlRoot){};
        clist_init(&root->conns);
}

void control_root_count_error(ControlRoot *root, int status)
{
        int32_t code = status_wire_encode(status);

        if (code < 0)
                root->counters.errors[-code]++;
}

void control_root_changed(ControlRoot *root)
{
        if (root->changed)
                root->changed(root->userdata);
}
