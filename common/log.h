/* SPDX-License-Identifier: MIT */
/*
 * Daemon logging: levels as syslog's. Under systemd (stderr is the journal) each record goes to
 * journald's native socket with structured fields (KVDIST_CLUSTER=, KVDIST_LINK=, KVDIST_PEER=,
 * see log-journal.h), falling back to "<level>message" lines on stderr; elsewhere lines are
 * "kvdistd[pid]: level: message" on stderr. Warnings and errors are rate-limited per call site.
 */
#pragma once

#include <stdarg.h>
#include <syslog.h>

#include "common/log-journal.h"
#include "common/macro.h"

/* Per call site: at most LOG_RATELIMIT_BURST warnings and errors per LOG_RATELIMIT_INTERVAL. */
#define LOG_RATELIMIT_INTERVAL (10ULL * 1000000ULL)
#define LOG_RATELIMIT_BURST 20

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
 * One write(2) or one datagram per record (cut at 2 KiB), so records of concurrent threads never
 * mix; errno is kept. Warnings and errors beyond the rate limit are counted, not written.
 */
int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *fmt, ...) _printf_(6, 7);

/* log_internal() with the structured fields @fields (may be NULL) for the journal. */
int log_internal_fields(int level, int error, const char *file, int line, const char *func,
                        const LogFields *fields, const char *fmt, ...) _printf_(7, 8);
int log_internalv(int level, int error, const char *file, int line, const char *func,
                  const LogFields *fields, const char *fmt, va_list ap) _printf_(7, 0);

/* Changes the rate limit (burst 0: none) and forgets what was counted. For tests. */
void log_set_ratelimit(unsigned long long interval_usec, unsigned burst);

/* Fields for log_fields(): LOG_CLUSTER(7), LOG_LINK(3, 7), LOG_PEER("10.0.0.2:26001"). */
#define LOG_CLUSTER(id) (&(const LogFields){.has_cluster = true, .cluster = (id)})
#define LOG_LINK(link_id, cluster_id)                                                              \
        (&(const LogFields){.has_link = true,                                                      \
                            .link = (link_id),                                                     \
                            .has_cluster = true,                                                   \
                            .cluster = (cluster_id)})
#define LOG_PEER(p) (&(const LogFields){.peer = (p)})

/* log_full_errno() with structured fields: log_fields(LOG_INFO, 0, LOG_CLUSTER(7), "..."). */
#define log_fields(level, error, fields, ...)                                                      \
        log_internal_fields(level, error, __FILE__, __LINE__, __func__, fields, __VA_ARGS__)

#define log_full_errno(level, error, ...)                                                          \
        log_internal(level, error, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_debug(...) log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...) log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...) log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...) log_full_errno(LOG_ERR, 0, __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, e, __VA_ARGS__)
#define log_error_errno(e, ...) log_full_errno(LOG_ERR, e, __VA_ARGS__)
#define log_debug_errno(e, ...) log_full_errno(LOG_DEBUG, e, __VA_ARGS__)
