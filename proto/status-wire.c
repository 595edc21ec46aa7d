/* SPDX-License-Identifier: MIT */
/* Status on the wire: the daemon's codes folded into the public ones and back. */
#include <kvdist/kvdist.h>

#include "common/status.h"
#include "proto/status-wire.h"

/* The daemon's codes mirror the public ones one for one, in the same order. */
#define SAME(name) _Static_assert(STATUS_##name - _STATUS_BASE == KVD_E_##name, #name)
SAME(FAILED);
SAME(PARAM_INVALID);
SAME(TIMEOUT);
SAME(CACHE_NOT_EXIST);
SAME(NOT_YET_LINK);
SAME(ALREADY_LINK);
SAME(LINK_FAILED);
SAME(UNLINK_FAILED);
SAME(CLUSTER_NUM_EXCEED_LIMIT);
SAME(PROCESSING_LINK);
SAME(OUT_OF_MEMORY);
SAME(EXIST_LINK);
SAME(FEATURE_NOT_ENABLED);
SAME(LINK_BUSY);
SAME(CACHE_KEY_ALREADY_EXIST);
SAME(CACHE_ID_ALREADY_EXIST);
SAME(NOT_INITIALIZED);
SAME(CLUSTER_EXISTS);
SAME(CACHE_INCOMPATIBLE);
SAME(LIMIT_EXCEEDED);
SAME(UNSUPPORTED);
SAME(DAEMON_UNAVAILABLE);
SAME(PEER_LOST);
SAME(PERMISSION_DENIED);
SAME(PROTOCOL_MISMATCH);
SAME(BUSY);
SAME(IN_PROGRESS);
SAME(CANCELLED);
_Static_assert(_STATUS_MIN - _STATUS_BASE == _KVD_E_MIN, "a status without a public code");

int32_t status_wire_encode(int status)
{
        if (status_is_errno(status))
                status = status_from_errno(status);
        if (status == STATUS_OK)
                return KVD_OK;
        if (!status_is_valid(status))
                return KVD_E_FAILED;
        return status - _STATUS_BASE;
}

int status_wire_decode(int32_t code)
{
        if (code == KVD_OK)
                return STATUS_OK;
        if (code < _KVD_E_MIN || code > KVD_E_FAILED)
                return STATUS_FAILED;
        return _STATUS_BASE + code;
}

const char *status_wire_name(int status)
{
        return kvd_strerror(status_wire_encode(status));
}
