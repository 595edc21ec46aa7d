/* SPDX-License-Identifier: MIT */
/* Handlers: pull and push of caches and blocks. */
#include "daemon/control/conn.h"
#include "daemon/control/control-root.h"
#include "daemon/control/dispatch.h"
#include "proto/kvdist.pb-c.h"
#include "daemon/transfer/transfer.h"

int handle_transfer(Request *req, Error *err)
{
        int r;

        r = transfer_start(req->conn->root->transfer, req->conn->cluster,
                           (const Kvdist__V1__Transfer *)req->msg, &req->done, err);
        if (r < 0)
                return r;
        return HANDLER_PENDING;
}
