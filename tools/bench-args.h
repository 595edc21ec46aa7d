/* SPDX-License-Identifier: MIT */
/* kvdist-bench's command line: its options, their defaults and checks, and the standard suites. */
#pragma once

#include <stdbool.h>

#include "tools/bench.h"

#define BENCH_SUITE_CASES 5

/* Fills @a from the command line; 1 after --help, -EINVAL (said on stderr) on a usage error. */
int bench_parse_args(int argc, char **argv, Args *a);

/* The standard cases of --suite: on one node, or (@remote) across two daemons. */
void bench_suite_workloads(bool remote, Workload w[static BENCH_SUITE_CASES]);
