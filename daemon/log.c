/* SPDX-License-Identifier: MIT */
/* Daemon logging: one write(2) per line on stderr, "<N>" prefixed when stderr is the journal. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

/* A line longer than this is cut; journald's own line limit is larger, syslog's smaller. */
#define LOG_LINE_MAX 2048

enum {
        TARGET_UNKNOWN = -1,
        TARGET_CONSOLE,
        TARGET_JOURNAL,
};

static int log_max_level = LOG_INFO;
static int log_target = TARGET_UNKNOWN;

static const char *const log_level_names[] = {
        [LOG_EMERG] = "emerg",
        [LOG_ALERT] = "alert",
        [LOG_CRIT] = "crit",
        [LOG_ERR] = "error",
        [LOG_WARNING] = "warning",
        [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info",
        [LOG_DEBUG] = "debug",
};

int log_level_from_string(const char *s)
{
        /* Only the levels a configuration may choose; nothing the daemon logs is above error. */
        for (int l = LOG_ERR; l <= LOG_DEBUG; l++)
                if (s && strcmp(s, log_level_names[l]) == 0)
                        return l;
        return -EINVAL;
}

const char *log_level_to_string(int level)
{
        if (level < 0 || (size_t)level >= ARRAY_SIZE(log_level_names))
                return NULL;
        return log_level_names[level];
}

void log_set_max_level(int level)
{
        __atomic_store_n(&log_max_level, LOG_PRI(level), __ATOMIC_RELAXED);
}

int log_get_max_level(void)
{
        return __atomic_load_n(&log_max_level, __ATOMIC_RELAXED);
}

static bool stderr_is_journal(void)
{
        unsigned long long dev, ino;
        const char *e;
        struct stat st;
        int consumed = 0;

        e = getenv("JOURNAL_STREAM");
        if (!e)
                return false;
        if (sscanf(e, "%llu:%llu%n", &dev, &ino, &consumed) != 2 || e[consumed] != '\0')
                return false;
        if (fstat(STDERR_FILENO, &st) < 0)
                return false;
        return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_open(void)
{
        int saved_errno = errno;

        __atomic_store_n(&log_target, stderr_is_journal() ? TARGET_JOURNAL : TARGET_CONSOLE,
                         __ATOMIC_RELAXED);
        errno = saved_errno;
}

static void write_all(int fd, const char *buf, size_t n)
{
        while (n > 0) {
                ssize_t k = write(fd, buf, n);

                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return;
                }
                buf += k;
                n -= (size_t)k;
        }
}

/* Adds what snprintf() said it wrote to *@n, capped at what @size held. */
static void advance(size_t *n, int k, size_t size)
{
        if (k > 0)
                *n = MIN(*n + (size_t)k, size - 1);
}

int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *fmt, ...)
{
        int saved_errno = errno;
        char buf[LOG_LINE_MAX];
        size_t n = 0;
        int target;
        va_list ap;

        level = LOG_PRI(level);
        if (level > log_get_max_level()) {
                errno = saved_errno;
                return error;
        }

        target = __atomic_load_n(&log_target, __ATOMIC_RELAXED);
        if (target == TARGET_UNKNOWN) {
                log_open();
                target = __atomic_load_n(&log_target, __ATOMIC_RELAXED);
        }

        /* The last byte of buf stays free for the newline. */
        if (target == TARGET_JOURNAL)
                advance(&n, snprintf(buf, LOG_LINE_MAX, "<%d>kvdistd: ", level), LOG_LINE_MAX);
        else
                advance(&n,
                        snprintf(buf, LOG_LINE_MAX, "kvdistd[%ld]: %s: ", (long)getpid(),
                                 log_level_names[level]),
                        LOG_LINE_MAX);

        /* %m in @fmt then names @error rather than whatever errno happened to hold. */
        errno = error != 0 ? abs(error) : saved_errno;
        va_start(ap, fmt);
        advance(&n, vsnprintf(buf + n, LOG_LINE_MAX - n, fmt, ap), LOG_LINE_MAX);
        va_end(ap);

        if (error != 0 && !strstr(fmt, "%m")) {
                char ebuf[128];

                advance(&n,
                        snprintf(buf + n, LOG_LINE_MAX - n, ": %s",
                                 strerror_r(abs(error), ebuf, sizeof(ebuf))),
                        LOG_LINE_MAX);
        }
        buf[n++] = '\n';
        write_all(STDERR_FILENO, buf, n);

        errno = saved_errno;
        return error;
}
