/* SPDX-License-Identifier: MIT */
/*
 * Status on the wire: clients and peer daemons speak the public KVD_E_* codes of
 * <kvdist/kvdist.h>; kvdistd's own codes (common/status.h) are folded into them here, where a
 * status leaves the daemon, and read back where one comes in.
 */
#pragma once

#include <stdint.h>

/*
 * The public code of @status (KVD_OK or a KVD_E_*). A negative errno is a status first
 * (status_from_errno()); anything else is KVD_E_FAILED.
 */
int32_t status_wire_encode(int status);

/* The daemon's status for @code as a client or peer sent it; unknown codes are STATUS_FAILED. */
int status_wire_decode(int32_t code);

/* The public name of @status ("KVD_E_TIMEOUT"), for logs and status documents. */
const char *status_wire_name(int status);
