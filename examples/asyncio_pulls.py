#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Several pulls driven from an asyncio event loop, with kvdist's task fds.

A decode worker does not block a thread per transfer: it starts pulls with the *_async calls
and lets its event loop wake it when each one is done. Each CacheTask has a file descriptor
(fileno()) that polls readable once the task may be done; loop.add_reader() on it, then done(),
turns a task into an awaitable:

    async def finished(task):
        ...  # add_reader(task.fileno(), ...) until task.done(), then task.wait()

This example attaches a prompt cluster and a decoder cluster to one kvdistd (two clusters of one
process, linked as two nodes' would be), fills the prompt's blocks cache with a seeded pattern,
pulls N slices of it concurrently from the event loop (and cancels one more pull before it can
matter, to show cancel()), and checks every byte that landed, and the guard bytes around the
destination cache. Exit status 0 when every byte matched. With --batch the N pulls go to the
daemon as one batch (CacheManager.transfer_batch(): one request, one task, a status per entry),
awaited the same way.

    PYTHONPATH=build/client-lib/python examples/asyncio_pulls.py --socket /run/kvdist/kvdist.sock
"""

import argparse
import asyncio
import sys

import numpy as np

import kvdist
from kvdist import (BatchEntry, BlocksCacheKey, CacheDesc, DataType, LLMClusterInfo, LLMDataDist,
                    LLMRole, LLMStatusCode)

GUARD = 4096


async def finished(task):
    """Waits, without blocking the loop, until @task is done; raises if it failed."""
    loop = asyncio.get_running_loop()
    fd = task.fileno()
    while not task.done():
        ready = loop.create_future()
        loop.add_reader(fd, ready.set_result, None)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
    task.wait(0)  # the transfer's status: raises LLMException on a failure


def attach(role, cluster_id, socket_path, listen=None):
    dd = LLMDataDist(role, cluster_id)
    options = {"ge.exec.deviceId": "0", "socket_path": socket_path}
    if listen:
        options["llm.listenIpInfo"] = listen
    dd.init(options)
    return dd


def guarded_cache(dd, num_blocks, block_bytes, seed, key=None):
    """A blocks cache of 2 tensors between GUARD bytes, filled with a seeded pattern."""
    mem = kvdist.empty((2, GUARD + num_blocks * block_bytes + GUARD), np.uint8, datadist=dd)
    mem[:] = np.random.default_rng(seed).integers(0, 256, size=mem.shape, dtype=np.uint8)
    addrs = [mem[t, GUARD:].__array_interface__["data"][0] for t in range(2)]
    desc = CacheDesc(2, [num_blocks, block_bytes], DataType.DT_UINT8)
    return mem, dd.cache_manager.register_blocks_cache(desc, addrs, key)


async def run(socket_path, listen, pulls, blocks_per_pull, block_bytes, batch=False):
    num_blocks = pulls * blocks_per_pull
    prompt = attach(LLMRole.PROMPT, 71, socket_path, listen)
    decoder = attach(LLMRole.DECODER, 72, socket_path)
    try:
        key = BlocksCacheKey(prompt.cluster_id, 0)
        src, _ = guarded_cache(prompt, num_blocks, block_bytes, 1, key)
        dst, dst_cache = guarded_cache(decoder, num_blocks, block_bytes, 2)
        before = dst.copy()
        info = LLMClusterInfo()
        info.remote_cluster_id = prompt.cluster_id
        info.remote_role_type = LLMRole.PROMPT
        ret, _ = decoder.link_clusters([info], 5000)
        if ret != LLMStatusCode.LLM_SUCCESS:
            raise RuntimeError(f"link_clusters: {ret}")

        # Pull i brings source blocks in reverse order into destination slice i.
        cm = decoder.cache_manager
        plans = []
        for i in range(pulls):
            dst_blocks = list(range(i * blocks_per_pull, (i + 1) * blocks_per_pull))
            plans.append((dst_blocks[::-1], dst_blocks))
        if batch:
            # One request to the daemon for all of them; one task, a status per entry.
            task = cm.transfer_batch([BatchEntry.pull_blocks(key, dst_cache, np.array(s),
                                                             np.array(d)) for s, d in plans],
                                     timeout_ms=30000)
            await finished(task)
            if task.entry_statuses() != [LLMStatusCode.LLM_SUCCESS] * pulls:
                raise RuntimeError(f"batch entries: {task.entry_statuses()}")
        else:
            tasks = [cm.pull_blocks_async(key, dst_cache, s, d, timeout_ms=30000)
                     for s, d in plans]
            await asyncio.gather(*(finished(t) for t in tasks))

        # One more pull, cancelled: cancel() returns once nothing more of it can land.
        extra = cm.pull_blocks_async(key, dst_cache, [0], [0], timeout_ms=30000)
        status = extra.cancel()
        if status not in (LLMStatusCode.LLM_CANCELLED, LLMStatusCode.LLM_SUCCESS):
            raise RuntimeError(f"cancel: {status}")

        expected = before.copy()
        for s, d in plans:
            for t in range(2):
                for sb, db in zip(s, d):
                    expected[t, GUARD + db * block_bytes:GUARD + (db + 1) * block_bytes] = \
                        src[t, GUARD + sb * block_bytes:GUARD + (sb + 1) * block_bytes]
        # The extra pull writes source block 0 into destination block 0 (which pull 0 filled
        # with source block blocks_per_pull - 1): all of it when it finished first.
        if status == LLMStatusCode.LLM_SUCCESS:
            for t in range(2):
                expected[t, GUARD:GUARD + block_bytes] = src[t, GUARD:GUARD + block_bytes]
        else:
            # Cancelled: each byte of block 0 is the old one or the source's, nothing else.
            for t in range(2):
                got = dst[t, GUARD:GUARD + block_bytes]
                old = expected[t, GUARD:GUARD + block_bytes]
                new = src[t, GUARD:GUARD + block_bytes]
                if not np.all((got == old) | (got == new)):
                    raise RuntimeError("the cancelled pull wrote bytes that are not the source's")
                expected[t, GUARD:GUARD + block_bytes] = got
        if not np.array_equal(dst, expected):
            bad = np.argwhere(dst != expected)
            raise RuntimeError(f"{len(bad)} bytes differ, first at {tuple(bad[0])}")
        how = " in one batch" if batch else ""
        print(f"{pulls} pulls{how} of {blocks_per_pull} blocks of {block_bytes} bytes from the "
              f"event loop: every byte as expected; the extra pull's cancel said {status.name}")
    finally:
        decoder.finalize()
        prompt.finalize()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="kvdistd's socket")
    parser.add_argument("--listen", help="the prompt cluster's listen_ip_info (ip:port, e.g. the "
                        "daemon's own --listen address)")
    parser.add_argument("--pulls", type=int, default=8)
    parser.add_argument("--blocks-per-pull", type=int, default=16)
    parser.add_argument("--block-bytes", type=int, default=16384)
    parser.add_argument("--batch", action="store_true", help="submit the pulls as one batch")
    args = parser.parse_args()
    asyncio.run(run(args.socket, args.listen, args.pulls, args.blocks_per_pull,
                    args.block_bytes, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
