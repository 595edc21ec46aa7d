/* SPDX-License-Identifier: MIT */
/* Handlers: read-only requests about the daemon itself (its metrics). */
#include <stdlib.h>

#include "daemon/control/conn.h"
#include "daemon/control/control-root.h"
#include "daemon/control/dispatch.h"
#include "proto/kvdist.pb-c.h"
#include "daemon/metrics/metrics.h"
#include "common/status.h"

int handle_daemon_metrics(Request *req, Error *err)
{
        Kvdist__V1__DaemonMetricsReply reply = KVDIST__V1__DAEMON_METRICS_REPLY__INIT;
        Kvdist__V1__Status status = KVDIST__V1__STATUS__INIT;
        _cleanup_free_ char *text = NULL;
        size_t len;

        if (metrics_render(req->conn->root->metrics, &text, &len) < 0)
                return error_set(err, STATUS_OUT_OF_MEMORY, "cannot build the metrics document");
        reply.status = &status;
        reply.text = text;
        return conn_request_reply(req, &reply.base, -1), 0;
}
