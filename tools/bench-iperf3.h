/* SPDX-License-Identifier: MIT */
/*
 * kvdist-bench's network baselines over loopback: one iperf3 test, its JSON report parsed, or
 * one ucx_perftest tag_bw test, its final line parsed.
 */
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

/*
 * UCX's own benchmark, the engine NIXL runs on, over TCP on loopback: `ucx_perftest -p PORT` as
 * the server and `ucx_perftest 127.0.0.1 -p PORT -t tag_bw -s @msg_bytes -n @messages` against
 * it, with UCX_TLS=tcp and UCX_NET_DEVICES=lo. *@ret_gbps is the client's overall bandwidth of
 * its "Final:" line (MB/s there are 2^20 bytes) in GB/s (1e9 bytes/s). Both processes are gone
 * when it returns. -ETIMEDOUT past @timeout_ms, -EIO (said on stderr) when ucx_perftest failed
 * or printed no final line, -EINVAL for 0 bytes or messages, or a negative errno. @path is found
 * by bench_iperf3_find() as well.
 */
int bench_ucx_run(const char *path, uint64_t msg_bytes, uint64_t messages, unsigned timeout_ms,
                  double *ret_gbps);
