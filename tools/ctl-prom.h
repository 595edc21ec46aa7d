/* SPDX-License-Identifier: MIT */
/* kvdistctl metrics: the daemon's Prometheus text as JSON samples, for `metrics --json`. */
#pragma once

#include <jansson.h>

/*
 * Parses the Prometheus text document @text into an array of
 * {"name", "type", "labels": {...}, "value"} objects, one per sample (the type is the family's,
 * "untyped" without a TYPE line; +Inf, -Inf and NaN values are strings). Returns the array, or
 * NULL when a line is not a comment or a sample (*@ret_line says which, from 1) or memory ran
 * out (*@ret_line 0).
 */
json_t *prom_to_json(const char *text, unsigned *ret_line);
