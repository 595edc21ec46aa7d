/* SPDX-License-Identifier: MIT */
/* Error: a status plus the human detail a client gets from kvd_last_error(). */
#pragma once

#include <stdarg.h>

#include "common/macro.h"
#include "common/status.h"

#define ERROR_MSG_MAX 256

typedef struct Error {
        int code;                /* 0, or a negative status: STATUS_* in kvdistd, KVD_E_* in
                                  * libkvdist */
        char msg[ERROR_MSG_MAX]; /* "" when there is nothing to add */
} Error;

#define ERROR_INIT                                                                                 \
        {                                                                                          \
                0, ""                                                                              \
        }

/*
 * Records @code with a printf-style detail in @err (which may be NULL) and returns @code, so a
 * failing check reads "return error_set(err, KVD_E_PARAM_INVALID, "...", ...);". An error already
 * recorded is kept: the first failure is the one the caller hears about.
 */
int error_set(Error *err, int code, const char *fmt, ...) _printf_(3, 4);
int error_setv(Error *err, int code, const char *fmt, va_list ap) _printf_(3, 0);

/* Forgets a recorded error. */
void error_clear(Error *err);
