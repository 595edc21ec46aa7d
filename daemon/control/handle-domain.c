/* SPDX-License-Identifier: MIT */
/* Handlers: the domain requests, handed down to domain/ with the request's Completion. */
#include "daemon/control/conn.h"
#include "daemon/control/control-root.h"
#include "daemon/control/dispatch.h"
#include "daemon/domain/domain.h"
#include "proto/kvdist.pb-c.h"

int handle_domain_link(Request *req, Error *err)
{
        return domain_handle_link(req->conn->root->domains, req->conn->cluster,
                                  (const Kvdist__V1__DomainLink *)req->msg, &req->done, err);
}

int handle_domain_unlink(Request *req, Error *err)
{
        return domain_handle_unlink(req->conn->root->domains, req->conn->cluster,
                                    (const Kvdist__V1__DomainUnlink *)req->msg, &req->done, err);
}

int handle_domain_query(Request *req, Error *err)
{
        return domain_handle_query(req->conn->root->domains, req->conn->cluster,
                                   (const Kvdist__V1__DomainQuery *)req->msg, &req->done, err);
}

int handle_domain_send_recv(Request *req, Error *err)
{
        return domain_handle_send_recv(req->conn->root->domains, req->conn->cluster,
                                       (const Kvdist__V1__DomainSendRecv *)req->msg, &req->done,
                                       err);
}

int handle_domain_broadcast(Request *req, Error *err)
{
        return domain_handle_broadcast(req->conn->root->domains, req->conn->cluster,
                                       (const Kvdist__V1__DomainBroadcast *)req->msg, &req->done,
                                       err);
}

int handle_domain_all_gather(Request *req, Error *err)
{
        return domain_handle_all_gather(req->conn->root->domains, req->conn->cluster,
                                        (const Kvdist__V1__DomainAllGather *)req->msg, &req->done,
                                        err);
}
