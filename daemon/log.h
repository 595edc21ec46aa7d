/* SPDX-License-Identifier: MIT */
/* Daemon logging: levels as syslog's, "<level>message" to stderr (journald reads the prefix). */
#pragma once

#include <syslog.h>

#include "macro.h"

/* The most verbose level that is written (syslog numbers; default LOG_INFO). Thread safe. */
/* The syslog level named @s ("error" .. "debug"), or -EINVAL. */
int log_level_from_string(const char *s);
/* The name of @level, or NULL when it is not a syslog level. */
const char *log_level_to_string(int level);

void log_set_max_level(int level);
int log_get_max_level(void);

/*
 * (Re)checks whether stderr is the journal ($JOURNAL_STREAM names its device:inode), which picks
 * "<N>kvdistd: message" over "kvdistd[pid]: level: message". log_internal() does this on first
 * use; call it again after redirecting stderr.
 */
void log_open(void);

/*
 * Logs at @level when enabled; returns @error so "return log_error_errno(r, ...)" works. A
 * non-zero @error (either sign) is appended as ": <strerror>" unless @fmt names it with %m.
 * One write(2) per line (cut at 2 KiB), so lines of concurrent threads never mix; errno is kept.
 */
int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *fmt, ...) _printf_(6, 7);

#define log_full_errno(level, error, ...) \
        log_internal(level, error, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_debug(...) log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...) log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...) log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...) log_full_errno(LOG_ERR, 0, __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, e, __VA_ARGS__)
#define log_error_errno(e, ...) log_full_errno(LOG_ERR, e, __VA_ARGS__)
#define log_debug_errno(e, ...) log_full_errno(LOG_DEBUG, e, __VA_ARGS__)
