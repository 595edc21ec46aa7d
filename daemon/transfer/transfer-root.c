/* SPDX-License-Identifier: MIT */
/* TransferRoot: the transfer layer's root object (see transfer-root.h). */

#include "daemon/transfer/transfer-root.h"

void transfer_root_init(TransferRoot *root)
{
        clist_init(&root->transfers);
        clist_init(&root->served);
        hook_list_init(&root->events);
}

void transfer_root_changed(TransferRoot *root)
{
        if (root->changed)
                root->changed(root->userdata);
}

void transfer_root_ended(TransferRoot *root)
{
        if (root->ended)
                root->ended(root->userdata);
}
