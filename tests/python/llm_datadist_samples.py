# SPDX-License-Identifier: MIT
"""Runs LLM-DataDist's own Python samples (hicann/hixl examples/python/llm_datadist/*.py) on
kvdist. Their licence (CANN Open Software License, for Huawei processors only) does not let
kvdist ship them: test_samples_real.py runs them from the folder $KVDIST_LLM_DATADIST_SAMPLES
names, after exactly three mechanical edits that port() makes and counts:

1. the import: "from llm_datadist import" becomes "from kvdist import", preceded by
   "import kvdist" (for rule 2);
2. the tensor placement: "torch.npu.set_device(...)" becomes "pass" (there is no NPU to
   select), and every "T.npu()" (a tensor moved to the NPU) becomes a kvdist tensor of T's
   shape, dtype and values: "(lambda t: kvdist.empty_torch(t.shape, t.dtype).copy_(t))(T)",
   which the samples evaluate after init(), as kvdist.empty_torch() needs;
3. the host addresses: the constants PROMPT_HOST_IP and DECODER_HOST_IP (the rank tables'
   host_ip and torch.distributed's master) become the addresses of the two local kvdistd. The
   samples that take addresses as arguments (--local_host_ip, --remote_host_ip,
   --local_ip_port, --remote_ip_port) are given those addresses and are not edited for them.

Each process attaches to its kvdistd through $KVDIST_SOCKET (no edit). run() starts a sample
under this file as a wrapper, which records the bytes of every cache the sample holds just
before it unregisters, deallocates or finalizes (the samples print tensors at most), so that
the test checks every destination byte; a cache the sample allocates from the pool (whose
bytes the sample never sets) is filled with a seeded pattern first, so that a pull of it is
seen to move the right bytes. Nothing else of the sample changes."""

import ctypes
import os
import re
import runpy
import sys

import numpy as np

SAMPLES = ("hixl_transfer_backend_sample.py", "pull_blocks_sample.py",
           "pull_blocks_xpyd_sample.py", "pull_cache_sample.py", "pull_from_cache_to_blocks.py",
           "push_blocks_sample.py", "push_cache_sample.py", "switch_role_sample.py",
           "transfer_cache_async_sample.py")
# The samples whose two hosts are constants (rule 3); the others take them as arguments.
HOST_CONSTANTS = ("pull_blocks_sample.py", "pull_cache_sample.py",
                  "pull_from_cache_to_blocks.py")


class PortError(Exception):
    """A sample does not have what a rule edits: not the version these rules were made for."""


def _npu_calls(text):
    """(start, end, tensor expression) of each "EXPR.npu()", EXPR a call such as
    torch.full(...) that may span lines."""
    found = []
    for m in re.finditer(r"\)\s*\.npu\(\)", text):
        depth, i = 0, m.start()
        while True:
            if text[i] == ")":
                depth += 1
            elif text[i] == "(":
                depth -= 1
                if depth == 0:
                    break
            i -= 1
            if i < 0:
                raise PortError("unbalanced parentheses before .npu()")
        name = re.search(r"[\w.]+$", text[:i])
        if name is None:
            raise PortError(f"no call before .npu() at offset {m.start()}")
        found.append((name.start(), m.end(), text[name.start():m.start() + 1]))
    return found


def port(name, text, prompt_host, decoder_host):
    """The sample's text with the three edits; raises PortError where a rule finds nothing
    to edit (or, for the import, more than one place)."""
    n = text.count("from llm_datadist import")
    if n != 1 or re.search(r"^\s*import llm_datadist", text, re.M):
        raise PortError(f"{name}: expected one 'from llm_datadist import', found {n}")
    text = text.replace("from llm_datadist import", "import kvdist\nfrom kvdist import")

    text, n = re.subn(r"torch\.npu\.set_device\([^()]*\)", "pass", text)
    if n != 1:
        raise PortError(f"{name}: expected one torch.npu.set_device(), found {n}")
    for start, end, expr in reversed(_npu_calls(text)):
        text = (text[:start] + "(lambda t: kvdist.empty_torch(t.shape, t.dtype).copy_(t))("
                + expr + ")" + text[end:])
    if ".npu" in text:
        raise PortError(f"{name}: an NPU use the rules do not cover is left")

    if name in HOST_CONSTANTS:
        for const, host in (("PROMPT_HOST_IP", prompt_host), ("DECODER_HOST_IP", decoder_host)):
            text, n = re.subn(rf'^{const} = "[^"]*"$', f'{const} = "{host}"', text, flags=re.M)
            if n != 1:
                raise PortError(f"{name}: expected one {const} = \"...\", found {n}")
    return text


def ip_port_to_int(ip_port):
    """The cluster id pull_blocks_xpyd_sample.py makes of "ip:port" (IPv4 << 16 | port)."""
    ip, port_ = ip_port.split(":")
    a, b, c, d = (int(x) for x in ip.split("."))
    return (((a << 24) | (b << 16) | (c << 8) | d) << 16) | int(port_)


def pattern(seed, nbytes):
    return np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)


def pool_seed(cluster_id, cache_id):
    """The seed of the pattern a pool cache of cluster_id gets (one pattern over its tensors)."""
    return (cluster_id * 1000 + cache_id) % (1 << 63)


def _wrap(dump_dir, sample, argv):
    """Runs sample as __main__ with argv, recording each cache's bytes at its end into
    dump_dir/c<cluster_id>-<cache_id>.npy (num_tensors x bytes per tensor, uint8)."""
    import kvdist
    from kvdist import _datadist

    cm_cls = _datadist.CacheManager

    def tensors(cache):
        size = cache.cache_desc.size
        return np.stack([np.frombuffer(ctypes.string_at(a, size), np.uint8)
                         for a in cache.tensor_addrs])

    def dump(manager, cache):
        cluster = manager._datadist.cluster_id if hasattr(manager, "_datadist") else "x"
        path = os.path.join(dump_dir, f"c{cluster}-{cache.cache_id}.npy")
        if not os.path.exists(path):
            np.save(path, tensors(cache))

    hold = cm_cls._hold

    def _hold(self, cache_id, cache_desc, addrs, pool, blocks):
        cache = hold(self, cache_id, cache_desc, addrs, pool, blocks)
        if pool:
            size = cache_desc.size
            seed = pool_seed(self._datadist.cluster_id, cache_id)
            image = pattern(seed, size * len(addrs)).reshape(len(addrs), size)
            for t, a in enumerate(addrs):
                ctypes.memmove(a, image[t].ctypes.data, size)
        return cache

    def before(method, cache_of):
        def wrapped(self, *args, **kwargs):
            cache = cache_of(self, *args, **kwargs)
            if cache is not None:
                dump(self, cache)
            return method(self, *args, **kwargs)
        return wrapped

    def by_id(self, cache_id, *a, **k):
        return self._caches.get(getattr(cache_id, "cache_id", cache_id))

    def by_cache(self, cache, *a, **k):
        return self._caches.get(getattr(cache, "cache_id", None))

    cm_cls._hold = _hold
    cm_cls.unregister_cache = before(cm_cls.unregister_cache, by_id)
    cm_cls.deallocate_cache = before(cm_cls.deallocate_cache, by_cache)
    finalize = kvdist.LLMDataDist.finalize

    def _finalize(self):
        manager = self.cache_manager
        for cache in list(manager._caches.values()):
            dump(manager, cache)
        return finalize(self)

    kvdist.LLMDataDist.finalize = _finalize
    sys.argv = [sample, *argv]
    runpy.run_path(sample, run_name="__main__")


if __name__ == "__main__":
    _wrap(sys.argv[1], sys.argv[2], sys.argv[3:])
