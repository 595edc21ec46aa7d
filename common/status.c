/* SPDX-License-Identifier: MIT */
/* Status: the daemon's codes, and the one mapping from errno to them. */
#include <errno.h>

#include "common/status.h"

int status_from_errno(int error)
{
        if (error == 0 || status_is_valid(error))
                return error;
        switch (error) {
        case -ECONNRESET:
        case -ECONNABORTED:
        case -ECANCELED:
        case -EPIPE:
        case -ENOTCONN:
        case -ESHUTDOWN:
                return STATUS_PEER_LOST;
        case -ETIMEDOUT:
                return STATUS_TIMEOUT;
        case -ENOMEM:
                return STATUS_OUT_OF_MEMORY;
        default:
                return STATUS_FAILED;
        }
}
