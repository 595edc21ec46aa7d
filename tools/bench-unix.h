/* SPDX-License-Identifier: MIT */
/*
 * kvdist-bench's small-call baseline: a round trip over a Unix stream socket to an echo thread,
 * the least any call to the daemon costs.
 */
#pragma once

#include <stddef.h>

#include "common/macro.h"

/* The message of kvdist-bench's baseline: about what a small pull request weighs on the wire. */
#define BENCH_UNIX_MSG_BYTES 128

/* A socket pair and the thread that echoes what arrives on its far end. */
typedef struct BenchUnix BenchUnix;

/*
 * Starts the echo thread for messages of @msg_bytes (1..4096). On success *@ret owns it. -EINVAL,
 * -ENOMEM, or the error of creating the sockets or the thread.
 */
int bench_unix_new(size_t msg_bytes, BenchUnix **ret);

/* One round trip: sends a message and waits for its echo; the wall time in ns, or -1 on error. */
double bench_unix_round(BenchUnix *u);

/* Closes the sockets (the echo thread sees EOF) and joins the thread. Accepts NULL; returns NULL.
 */
BenchUnix *bench_unix_free(BenchUnix *u);

DEFINE_TRIVIAL_CLEANUP_FUNC(BenchUnix, bench_unix_free);
