/* SPDX-License-Identifier: MIT */
/*
 * Log journal: one log record sent to systemd-journald over its native protocol (a datagram
 * of KEY=value fields), without libsystemd, so that the fields (KVDIST_CLUSTER=, ...) are
 * structured and testable against a socket of the test's own.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define LOG_JOURNAL_SOCKET "/run/systemd/journal/socket"

/* What a log record is about; a field is sent when its has_ flag (or @peer) is set. */
typedef struct LogFields {
        bool has_cluster;
        uint64_t cluster;
        bool has_link;
        uint64_t link;
        const char *peer; /* "10.0.0.2:26001", a node name; NULL = none */
} LogFields;

/* Sends to @path instead of LOG_JOURNAL_SOCKET (NULL: back to it). For tests. */
void log_journal_set_socket(const char *path);

/*
 * Sends one record: PRIORITY=@level, SYSLOG_IDENTIFIER=kvdistd, MESSAGE=@message,
 * CODE_FILE/CODE_LINE/CODE_FUNC, ERRNO= when @error is not 0, and the set fields of @fields
 * (may be NULL). Thread safe. Returns 0 or negative errno (the journal is not there, ...).
 */
int log_journal_send(int level, int error, const char *file, int line, const char *func,
                     const LogFields *fields, const char *message);
