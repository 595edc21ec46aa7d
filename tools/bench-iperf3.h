/* SPDX-License-Identifier: MIT */
/* kvdist-bench's network baseline: one iperf3 test over loopback, its JSON report parsed. */
#pragma once

#include <stdint.h>

/*
 * Finds iperf3: @name with a slash is taken as a path, else it is looked up on $PATH. Returns 0
 * and the malloc()ed path in *@ret_path, -ENOENT when there is no such executable, -ENOMEM.
 */
int bench_iperf3_find(const char *name, char **ret_path);

/*
 * Runs `iperf3 -s -1` on 127.0.0.1 on a free port and `iperf3 -c 127.0.0.1 -t @seconds
 * -P @streams --json` against it, and returns the receiver's rate
 * (end.sum_received.bits_per_second) in GB/s (1e9 bytes/s) in *@ret_gbps. @seconds is at least 1
 * (iperf3 takes whole seconds, and 0 would run forever). Both processes are gone when it returns.
 * -ETIMEDOUT when the test took more than @timeout_ms, -EIO (said on stderr) when iperf3 failed
 * or reported no rate, -EINVAL for 0 seconds, or a negative errno.
 */
int bench_iperf3_run(const char *path, unsigned seconds, unsigned streams, unsigned timeout_ms,
                     double *ret_gbps);
