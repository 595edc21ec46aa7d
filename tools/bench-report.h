/* SPDX-License-Identifier: MIT */
/* kvdist-bench's output: the table a person reads, or one JSON document. */
#pragma once

#include <stddef.h>

#include "tools/bench.h"

/* Prints what the run measures and the table's column heads. */
void bench_report_header(const Args *a);

/* Prints one case's row (flushed, so that a long suite shows its progress). */
void bench_report_row(const Args *a, const Result *r);

/* Prints the whole run, the @n cases of @res, as one JSON document. */
void bench_report_json(const Args *a, const Result *res, size_t n);
