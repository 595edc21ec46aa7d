/* SPDX-License-Identifier: MIT */
/* libkvdist status names and version; kvdistd builds this file too, so it needs only the public
 * header. */
#include <kvdist/kvdist.h>
#include "common/macro.h"

static const char *const status_names[] = {
        [-KVD_OK] = "KVD_OK",
        [-KVD_E_FAILED] = "KVD_E_FAILED",
        [-KVD_E_PARAM_INVALID] = "KVD_E_PARAM_INVALID",
        [-KVD_E_TIMEOUT] = "KVD_E_TIMEOUT",
        [-KVD_E_CACHE_NOT_EXIST] = "KVD_E_CACHE_NOT_EXIST",
        [-KVD_E_NOT_YET_LINK] = "KVD_E_NOT_YET_LINK",
        [-KVD_E_ALREADY_LINK] = "KVD_E_ALREADY_LINK",
        [-KVD_E_LINK_FAILED] = "KVD_E_LINK_FAILED",
        [-KVD_E_UNLINK_FAILED] = "KVD_E_UNLINK_FAILED",
        [-KVD_E_CLUSTER_NUM_EXCEED_LIMIT] = "KVD_E_CLUSTER_NUM_EXCEED_LIMIT",
        [-KVD_E_PROCESSING_LINK] = "KVD_E_PROCESSING_LINK",
        [-KVD_E_OUT_OF_MEMORY] = "KVD_E_OUT_OF_MEMORY",
        [-KVD_E_EXIST_LINK] = "KVD_E_EXIST_LINK",
        [-KVD_E_FEATURE_NOT_ENABLED] = "KVD_E_FEATURE_NOT_ENABLED",
        [-KVD_E_LINK_BUSY] = "KVD_E_LINK_BUSY",
        [-KVD_E_CACHE_KEY_ALREADY_EXIST] = "KVD_E_CACHE_KEY_ALREADY_EXIST",
        [-KVD_E_CACHE_ID_ALREADY_EXIST] = "KVD_E_CACHE_ID_ALREADY_EXIST",
        [-KVD_E_NOT_INITIALIZED] = "KVD_E_NOT_INITIALIZED",
        [-KVD_E_CLUSTER_EXISTS] = "KVD_E_CLUSTER_EXISTS",
        [-KVD_E_CACHE_INCOMPATIBLE] = "KVD_E_CACHE_INCOMPATIBLE",
        [-KVD_E_LIMIT_EXCEEDED] = "KVD_E_LIMIT_EXCEEDED",
        [-KVD_E_UNSUPPORTED] = "KVD_E_UNSUPPORTED",
        [-KVD_E_DAEMON_UNAVAILABLE] = "KVD_E_DAEMON_UNAVAILABLE",
        [-KVD_E_PEER_LOST] = "KVD_E_PEER_LOST",
        [-KVD_E_PERMISSION_DENIED] = "KVD_E_PERMISSION_DENIED",
        [-KVD_E_PROTOCOL_MISMATCH] = "KVD_E_PROTOCOL_MISMATCH",
        [-KVD_E_BUSY] = "KVD_E_BUSY",
        [-KVD_E_IN_PROGRESS] = "KVD_E_IN_PROGRESS",
        [-KVD_E_CANCELLED] = "KVD_E_CANCELLED",
};

_Static_assert(ARRAY_SIZE(status_names) == 1 - _KVD_E_MIN, "a status has no name");

_public_ const char *kvd_strerror(int status)
{
        if (status > 0 || status < _KVD_E_MIN || !status_names[-status])
                return "unknown status";
        return status_names[-status];
}

_public_ const char *kvd_version(void)
{
        return KVDIST_VERSION;
}
