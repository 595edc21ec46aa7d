/* SPDX-License-Identifier: MIT */
/* Metrics text: the Prometheus text exposition format, written into a memory stream. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/metrics/metrics-text.h"

int metrics_writer_init(MetricsWriter *w)
{
        *w = (MetricsWriter){};
        w->f = open_memstream(&w->buf, &w->len);
        return w->f ? 0 : -ENOMEM;
}

void metrics_writer_deinit(MetricsWriter *w)
{
        if (w->f)
                (void)fclose(w->f);
        free(w->buf);
        *w = (MetricsWriter){};
}

int metrics_writer_finish(MetricsWriter *w, char **ret, size_t *ret_len)
{
        int r = w->error;

        if (w->f && fclose(w->f) != 0 && r == 0)
                r = -ENOMEM;
        w->f = NULL;
        if (r < 0) {
                metrics_writer_deinit(w);
                return r;
        }
        *ret = w->buf;
        *ret_len = w->len;
        *w = (MetricsWriter){};
        return 0;
}

static void put(MetricsWriter *w, const char *s)
{
        if (!w->error && fputs(s, w->f) == EOF)
                w->error = -ENOMEM;
}

/* HELP text escapes backslash and newline; label values also the double quote. */
static void put_escaped(MetricsWriter *w, const char *s, bool quote)
{
        for (; *s && !w->error; s++) {
                int r;

                if (*s == '\\')
                        r = fputs("\\\\", w->f);
                else if (*s == '\n')
                        r = fputs("\\n", w->f);
                else if (*s == '"' && quote)
                        r = fputs("\\\"", w->f);
                else
                        r = fputc(*s, w->f);
                if (r == EOF)
                        w->error = -ENOMEM;
        }
}

void metrics_family(MetricsWriter *w, const char *name, const char *type, const char *help)
{
        put(w, "# HELP ");
        put(w, name);
        put(w, " ");
        put_escaped(w, help, false);
        put(w, "\n# TYPE ");
        put(w, name);
        put(w, " ");
        put(w, type);
        put(w, "\n");
}

/* "name{a="x",le="0.5"}": @labels (may be NULL) plus an optional le="@le". */
static void put_name(MetricsWriter *w, const char *name, const MetricsLabel *labels, const char *le)
{
        bool first = true;

        put(w, name);
        if ((!labels || !labels[0].name) && !le)
                return;
        put(w, "{");
        for (const MetricsLabel *l = labels; l && l->name; l++) {
                put(w, first ? "" : ",");
                put(w, l->name);
                put(w, "=\"");
                put_escaped(w, l->value ? l->value : "", true);
                put(w, "\"");
                first = false;
        }
        if (le) {
                put(w, first ? "le=\"" : ",le=\"");
                put(w, le);
                put(w, "\"");
        }
        put(w, "}");
}

static void put_u64(MetricsWriter *w, uint64_t v)
{
        char buf[32];

        (void)snprintf(buf, sizeof(buf), " %" PRIu64 "\n", v);
        put(w, buf);
}

/* 15 significant digits: exact enough, and free of binary noise; infinities are spelled out. */
static void format_double(double v, char *buf, size_t size)
{
        if (isnan(v))
                (void)snprintf(buf, size, "NaN");
        else if (isinf(v))
                (void)snprintf(buf, size, v > 0 ? "+Inf" : "-Inf");
        else
                (void)snprintf(buf, size, "%.15g", v);
}

void metrics_sample_u64(MetricsWriter *w, const char *name, const MetricsLabel *labels,
                        uint64_t value)
{
        put_name(w, name, labels, NULL);
        put_u64(w, value);
}

void metrics_sample_double(MetricsWriter *w, const char *name, const MetricsLabel *labels,
                           double value)
{
        char buf[40];

        put_name(w, name, labels, NULL);
        format_double(value, buf, sizeof(buf));
        put(w, " ");
        put(w, buf);
        put(w, "\n");
}

void metrics_histogram(MetricsWriter *w, const char *name, const MetricsLabel *labels,
                       const double *bounds, const uint64_t *counts, size_t n, uint64_t count,
                       double sum)
{
        char sample[128], le[40];
        uint64_t cumulative = 0;

        (void)snprintf(sample, sizeof(sample), "%s_bucket", name);
        for (size_t i = 0; i < n; i++) {
                cumulative += counts[i];
                /* %g keeps bucket bounds short and stable: 0.0001, 0.25, 10 */
                (void)snprintf(le, sizeof(le), "%g", bounds[i]);
                put_name(w, sample, labels, le);
                put_u64(w, cumulative);
        }
        put_name(w, sample, labels, "+Inf");
        put_u64(w, count);
        (void)snprintf(sample, sizeof(sample), "%s_sum", name);
        metrics_sample_double(w, sample, labels, sum);
        (void)snprintf(sample, sizeof(sample), "%s_count", name);
        metrics_sample_u64(w, sample, labels, count);
}
