/* SPDX-License-Identifier: MIT */
/* Error: a kvd status code plus a human-readable detail. */
#include <stdio.h>

#include "common/error.h"

int error_setv(Error *err, int code, const char *fmt, va_list ap)
{
        if (!err || err->code != 0)
                return code;
        err->code = code;
        if (fmt)
                (void)vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        else
                err->msg[0] = '\0';
        return code;
}

int error_set(Error *err, int code, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        code = error_setv(err, code, fmt, ap);
        va_end(ap);
        return code;
}

void error_clear(Error *err)
{
        if (!err)
                return;
        err->code = 0;
        err->msg[0] = '\0';
}
