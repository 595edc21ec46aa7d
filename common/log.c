/* SPDX-License-Identifier: MIT */
/*
 * Daemon logging: records to the journal's native socket with structured fields when stderr is
 * the journal, else one write(2) per line on stderr; repeated warnings and errors from one call
 * site are rate-limited.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log-journal.h"
#include "common/log.h"
#include "common/time-util.h"

/* A line longer than this is cut; journald's own line limit is larger, syslog's smaller. */
#define LOG_LINE_MAX 2048

enum {
        TARGET_UNKNOWN = -1,
        TARGET_CONSOLE,
        TARGET_JOURNAL,
};

static int log_max_level = LOG_INFO;
static int log_target = TARGET_UNKNOWN;

/*
 * Rate limit of warnings and errors, per call site (file and line): LOG_RATELIMIT_BURST records
 * per LOG_RATELIMIT_INTERVAL; what is left out is counted and said with the next one let through.
 * A fixed table: a site that does not fit evicts the one whose window began first.
 */
#define LOG_RATELIMIT_SITES 64

typedef struct LogRateSite {
        const char *file;
        int line;
        usec_t begin;
        unsigned n;
        unsigned suppressed;
} LogRateSite;

static pthread_mutex_t ratelimit_lock = PTHREAD_MUTEX_INITIALIZER;
static LogRateSite ratelimit_sites[LOG_RATELIMIT_SITES];
static usec_t ratelimit_interval = LOG_RATELIMIT_INTERVAL;
static unsigned ratelimit_burst = LOG_RATELIMIT_BURST;

static const char *const log_level_names[] = {
        [LOG_EMERG] = "emerg", [LOG_ALERT] = "alert",     [LOG_CRIT] = "crit",
        [LOG_ERR] = "error",   [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info",   [LOG_DEBUG] = "debug",
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

void log_set_ratelimit(unsigned long long interval_usec, unsigned burst)
{
        pthread_mutex_lock(&ratelimit_lock);
        ratelimit_interval = interval_usec;
        ratelimit_burst = burst;
        memset(ratelimit_sites, 0, sizeof(ratelimit_sites));
        pthread_mutex_unlock(&ratelimit_lock);
}

/*
 * Whether the record of @file:@line may be written now; *@ret_suppressed receives how many of
 * that site were left out before it (then reset).
 */
static bool ratelimit_pass(const char *file, int line, unsigned *ret_suppressed)
{
        usec_t now = now_usec(CLOCK_MONOTONIC);
        LogRateSite *site = NULL, *oldest = &ratelimit_sites[0];
        bool pass;

        *ret_suppressed = 0;
        pthread_mutex_lock(&ratelimit_lock);
        if (ratelimit_burst == 0) {
                pthread_mutex_unlock(&ratelimit_lock);
                return true;
        }
        for (size_t i = 0; i < LOG_RATELIMIT_SITES && !site; i++) {
                LogRateSite *x = &ratelimit_sites[i];

                if (x->file == file && x->line == line)
                        site = x;
                else if (!x->file || x->begin < oldest->begin)
                        oldest = x->file ? (oldest->file ? x : oldest) : x;
        }
        if (!site) {
                site = oldest;
                *site = (LogRateSite){.file = file, .line = line, .begin = now};
        }
        if (now - site->begin >= ratelimit_interval) {
                site->begin = now;
                site->n = 0;
        }
        pass = site->n < ratelimit_burst;
        if (pass) {
                site->n++;
                *ret_suppressed = site->suppressed;
                site->suppressed = 0;
        } else
                site->suppressed++;
        pthread_mutex_unlock(&ratelimit_lock);
        return pass;
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

/* Writes the finished record @msg (no newline) to the journal, or to stderr as one line. */
static void log_write(int level, int error, const char *file, int line, const char *func,
                      const LogFields *fields, const char *msg)
{
        char buf[LOG_LINE_MAX];
        size_t n = 0;
        int target;

        target = __atomic_load_n(&log_target, __ATOMIC_RELAXED);
        if (target == TARGET_UNKNOWN) {
                log_open();
                target = __atomic_load_n(&log_target, __ATOMIC_RELAXED);
        }
        /* The journal's own socket keeps the fields; its stream (stderr) takes the rest. */
        if (target == TARGET_JOURNAL &&
            log_journal_send(level, error, file, line, func, fields, msg) == 0)
                return;
        /* The last byte of buf stays free for the newline. */
        if (target == TARGET_JOURNAL)
                advance(&n, snprintf(buf, LOG_LINE_MAX, "<%d>kvdistd: %s", level, msg),
                        LOG_LINE_MAX);
        else
                advance(&n,
                        snprintf(buf, LOG_LINE_MAX, "kvdistd[%ld]: %s: %s", (long)getpid(),
                                 log_level_names[level], msg),
                        LOG_LINE_MAX);
        buf[n++] = '\n';
        write_all(STDERR_FILENO, buf, n);
}

int log_internalv(int level, int error, const char *file, int line, const char *func,
                  const LogFields *fields, const char *fmt, va_list ap)
{
        int saved_errno = errno;
        char msg[LOG_LINE_MAX];
        unsigned suppressed = 0;
        size_t n = 0;

        level = LOG_PRI(level);
        if (level > log_get_max_level()) {
                errno = saved_errno;
                return error;
        }
        if (level <= LOG_WARNING && !ratelimit_pass(file, line, &suppressed)) {
                errno = saved_errno;
                return error;
        }
        if (suppressed > 0) {
                (void)snprintf(msg, sizeof(msg), "%u similar messages from %s:%d were suppressed",
                               suppressed, file ? file : "?", line);
                log_write(level, 0, file, line, func, fields, msg);
        }

        /* %m in @fmt then names @error rather than whatever errno happened to hold. */
        errno = error != 0 ? abs(error) : saved_errno;
        advance(&n, vsnprintf(msg, LOG_LINE_MAX, fmt, ap), LOG_LINE_MAX);

        if (error != 0 && !strstr(fmt, "%m")) {
                char ebuf[128];

                advance(&n,
                        snprintf(msg + n, LOG_LINE_MAX - n, ": %s",
                                 strerror_r(abs(error), ebuf, sizeof(ebuf))),
                        LOG_LINE_MAX);
        }
        msg[n] = '\0';
        log_write(level, error, file, line, func, fields, msg);

        errno = saved_errno;
        return error;
}

int log_internal_fields(int level, int error, const char *file, int line, const char *func,
                        const LogFields *fields, const char *fmt, ...)
{
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = log_internalv(level, error, file, line, func, fields, fmt, ap);
        va_end(ap);
        return r;
}

int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *fmt, ...)
{
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = log_internalv(level, error, file, line, func, NULL, fmt, ap);
        va_end(ap);
        return r;
}
