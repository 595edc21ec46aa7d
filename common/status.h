/* SPDX-License-Identifier: MIT */
/*
 * Status: how a request ended inside kvdistd. The daemon has its own codes, apart from the
 * public KVD_E_* of <kvdist/kvdist.h> (which only the client and peer edges speak, through
 * proto/status-wire.h) and apart from negative errno: they are negative too, so "r < 0" still
 * means failure, but lie below every errno value (the kernel keeps those above -4096), so one int
 * holds either and status_is_errno() tells which. System errors become statuses in one place,
 * status_from_errno().
 */
#pragma once

#include <stdbool.h>

enum {
        STATUS_OK = 0,
        _STATUS_BASE = -4096,
        STATUS_FAILED = _STATUS_BASE - 1,        /* unclassified failure */
        STATUS_PARAM_INVALID = _STATUS_BASE - 2, /* an argument is wrong */
        STATUS_TIMEOUT = _STATUS_BASE - 3,       /* the deadline passed */
        STATUS_CACHE_NOT_EXIST = _STATUS_BASE - 4,
        STATUS_NOT_YET_LINK = _STATUS_BASE - 5,
        STATUS_ALREADY_LINK = _STATUS_BASE - 6,
        STATUS_LINK_FAILED = _STATUS_BASE - 7,
        STATUS_UNLINK_FAILED = _STATUS_BASE - 8,
        STATUS_CLUSTER_NUM_EXCEED_LIMIT = _STATUS_BASE - 9,
        STATUS_PROCESSING_LINK = _STATUS_BASE - 10,
        STATUS_OUT_OF_MEMORY = _STATUS_BASE - 11,
        STATUS_EXIST_LINK = _STATUS_BASE - 12,
        STATUS_FEATURE_NOT_ENABLED = _STATUS_BASE - 13,
        STATUS_LINK_BUSY = _STATUS_BASE - 14,
        STATUS_CACHE_KEY_ALREADY_EXIST = _STATUS_BASE - 15,
        STATUS_CACHE_ID_ALREADY_EXIST = _STATUS_BASE - 16,
        STATUS_NOT_INITIALIZED = _STATUS_BASE - 17,
        STATUS_CLUSTER_EXISTS = _STATUS_BASE - 18,
        STATUS_CACHE_INCOMPATIBLE = _STATUS_BASE - 19,
        STATUS_LIMIT_EXCEEDED = _STATUS_BASE - 20,
        STATUS_UNSUPPORTED = _STATUS_BASE - 21,
        STATUS_DAEMON_UNAVAILABLE = _STATUS_BASE - 22,
        STATUS_PEER_LOST = _STATUS_BASE - 23,
        STATUS_PERMISSION_DENIED = _STATUS_BASE - 24,
        STATUS_PROTOCOL_MISMATCH = _STATUS_BASE - 25,
        STATUS_BUSY = _STATUS_BASE - 26,
        STATUS_IN_PROGRESS = _STATUS_BASE - 27, /* the client's own: a task still running */
        STATUS_CANCELLED = _STATUS_BASE - 28,   /* the client cancelled the transfer */
        _STATUS_MIN = STATUS_CANCELLED,
};

/* Whether @r is one of the codes above (STATUS_OK included). */
static inline bool status_is_valid(int r)
{
        return r == STATUS_OK || (r <= STATUS_FAILED && r >= _STATUS_MIN);
}

/* Whether @r is a negative errno rather than a status. */
static inline bool status_is_errno(int r)
{
        return r < 0 && r > _STATUS_BASE;
}

/*
 * The status of a failed system call or data movement: @error is 0 (STATUS_OK) or a negative
 * errno; a status passes through unchanged. A connection that broke (-ECONNRESET, -EPIPE,
 * -ECANCELED, ...) is a lost peer, -ETIMEDOUT a timeout, -ENOMEM out of memory, -EILSEQ (a
 * checksum that failed) and everything else a failure.
 */
int status_from_errno(int error);
