/* SPDX-License-Identifier: MIT */
/*
 * Metrics text: a writer of the Prometheus text exposition format (version 0.0.4). One family
 * is a "# HELP" and a "# TYPE" line followed by its samples; label values are escaped here, so
 * callers pass them raw. Errors (out of memory) are remembered and reported once at the end.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct MetricsLabel {
        const char *name;
        const char *value;
} MetricsLabel;

/* A NULL-terminated label list for one sample: METRICS_LABELS({ "transport", "shm" }). */
#define METRICS_LABELS(...) ((const MetricsLabel[]){__VA_ARGS__, {NULL, NULL}})

typedef struct MetricsWriter {
        FILE *f;
        char *buf;
        size_t len;
        int error;
} MetricsWriter;

/* Starts an empty document. Returns 0 or -ENOMEM. */
int metrics_writer_init(MetricsWriter *w);

/*
 * Ends the document: *@ret (malloc()ed, NUL-terminated) and *@ret_len receive it. Returns 0 or
 * the first error; the writer is released either way.
 */
int metrics_writer_finish(MetricsWriter *w, char **ret, size_t *ret_len);

/* Frees an unfinished document. */
void metrics_writer_deinit(MetricsWriter *w);

/* "# HELP @name @help" and "# TYPE @name @type" (counter, gauge, histogram). */
void metrics_family(MetricsWriter *w, const char *name, const char *type, const char *help);

/* One sample: @name{labels} @value; @labels may be NULL. */
void metrics_sample_u64(MetricsWriter *w, const char *name, const MetricsLabel *labels,
                        uint64_t value);
void metrics_sample_double(MetricsWriter *w, const char *name, const MetricsLabel *labels,
                           double value);

/*
 * A histogram's samples: @name_bucket for each of the @n upper @bounds (ascending, counts per
 * bucket, not cumulative, in @counts) and for +Inf, then @name_sum and @name_count. @labels
 * may be NULL; "le" is added to them.
 */
void metrics_histogram(MetricsWriter *w, const char *name, const MetricsLabel *labels,
                       const double *bounds, const uint64_t *counts, size_t n, uint64_t count,
                       double sum);
