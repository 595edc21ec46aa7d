/* SPDX-License-Identifier: MIT */
/* kvdistctl domains: the table of comm domains (status document "domains"). */
#pragma once

#include <stddef.h>

#include "tools/ctl-table.h"

#define N_DOMAIN_COLS 12

extern const char *const domain_cols[N_DOMAIN_COLS];

/* Fills row @r of @t from one element of "domains". */
void domain_row(const json_t *o, Table *t, size_t r);
