# SPDX-License-Identifier: MIT
"""Fixtures of the Python tests: real kvdistd processes from the build tree ($KVDISTD), each with
its own socket in a temporary directory and a peer listener on 127.0.0.1, and LLMDataDist
instances attached to them; plus byte patterns and caches framed by guard bytes, so that every
test checks every destination byte and the bytes around it."""

import ctypes
import itertools
import os
import signal
import subprocess
import time

import numpy as np
import pytest

# Where the build cannot run the package at all (see tests/python/meson.build), every test is
# skipped with the reason, before anything imports kvdist.
SKIP_ALL = os.environ.get("KVDIST_PYTHON_SKIP")
if SKIP_ALL:
    collect_ignore_glob = ["test_*.py"]
else:
    import kvdist
    from kvdist import BlocksCacheKey, CacheDesc, DataType, LLMDataDist, LLMRole, LLMStatusCode

_outcomes = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.outcome] += 1


def pytest_sessionfinish(session, exitstatus):
    # meson counts exit status 77 as a skip: a run whose tests all skipped says so.
    if SKIP_ALL:
        print(f"\nSKIP: {SKIP_ALL}")
        session.exitstatus = 77
    elif _outcomes["skipped"] and not _outcomes["passed"] and not _outcomes["failed"]:
        session.exitstatus = 77

KVDISTD = os.environ.get("KVDISTD", "kvdistd")
START_TIMEOUT_S = 20
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # A daemon must not outlive a test run that was killed (meson's timeout).
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def daemon_env():
    """The environment for a daemon: without the interpreter's sanitizer preload (kvdistd links
    its own runtime), with the sanitizer options meant for the daemons (leaks detected)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if "KVDIST_DAEMON_ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] = env["KVDIST_DAEMON_ASAN_OPTIONS"]
    return env


class Daemon:
    """One kvdistd: socket, peer address (peer_addr), log; stop() checks it exited cleanly."""

    def __init__(self, directory, name, extra=(), listen="127.0.0.1:0",
                 heartbeat_ms=(200, 2000)):
        self.dir = directory / name
        self.dir.mkdir()
        self.socket = str(self.dir / "kvdist.sock")
        self.log_path = self.dir / "kvdistd.log"
        # A lost peer is noticed within 2 s, for the tests that kill one.
        self.args = [KVDISTD, "--socket", self.socket, "--log-level", "debug",
                     "--memory-size", "64M", "--listen", listen,
                     "--heartbeat-interval", str(heartbeat_ms[0]),
                     "--heartbeat-timeout", str(heartbeat_ms[1]), *extra]
        self.proc = None
        self.peer_addr = None

    def start(self):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=log, env=daemon_env(),
                                         preexec_fn=_die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                status = kvdist.daemon_status(self.socket)
                break
            except kvdist.LLMException:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.kill()
                    pytest.fail(f"kvdistd did not come up:\n{self.log()}")
                time.sleep(0.02)
        self.peer_addr = status["peer_listen"]
        return self

    def log(self):
        return self.log_path.read_text(errors="replace")

    def assert_clean_log(self):
        log = self.log()
        for needle in ("Sanitizer", "runtime error:"):
            assert needle not in log, f"kvdistd's log has a sanitizer report:\n{log}"

    def stop(self):
        """SIGTERM; the daemon must exit with 0 and a log without sanitizer reports."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"kvdistd did not stop on SIGTERM:\n{self.log()}")
        assert rc == 0, f"kvdistd exited with {rc}:\n{self.log()}"
        self.assert_clean_log()

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def daemons(tmp_path):
    """daemons(name, extra=(), listen=..., heartbeat_ms=...) starts a kvdistd; all are stopped
    and checked at the end."""
    started = []

    def start(name="kvdistd", extra=(), **kwargs):
        d = Daemon(tmp_path, name, extra, **kwargs).start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """One kvdistd shared by the tests of a module."""
    d = Daemon(tmp_path_factory.mktemp("kvdistd"), "shared").start()
    yield d
    d.stop()


_cluster_ids = itertools.count(1000)


@pytest.fixture
def attach():
    """attach(daemon, role=PROMPT, cluster_id=None, **options) -> an initialized LLMDataDist
    with a fresh cluster id; finalized at the end. Every cluster listens where its daemon
    accepts peers (listen_ip_info), so that any other cluster may link to it."""
    made = []

    def make(daemon, role=LLMRole.PROMPT, cluster_id=None, **options):
        dd = LLMDataDist(role, next(_cluster_ids) if cluster_id is None else cluster_id)
        opts = {"ge.exec.deviceId": "0", "socket_path": daemon.socket,
                "llm.listenIpInfo": daemon.peer_addr}
        opts.update(options)
        dd.init(opts)
        made.append(dd)
        return dd

    yield make
    for dd in made:
        dd.finalize()


def addr(array):
    """Where array's data starts (what tensor.data_ptr() says for a tensor)."""
    return array.__array_interface__["data"][0]


def pattern(seed, nbytes):
    """nbytes seeded random bytes."""
    return np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)


GUARD = 64


class Guarded:
    """A cache of num_tensors tensors of units x unit_bytes bytes in kvdist memory, each tensor
    between GUARD bytes before and after, all filled with a seeded pattern. expected() is that
    image to edit into what a transfer must leave; check(expected) compares every byte."""

    def __init__(self, dd, num_tensors, units, unit_bytes, seed, blocks=True, key=None,
                 cache_keys=(), remote_accessible=None, mem=None):
        self.dd = dd
        self.units = units
        self.unit_bytes = unit_bytes
        shape = (num_tensors, GUARD + units * unit_bytes + GUARD)
        # mem: an array of that shape in memory the test registered itself (register_memory())
        self.mem = kvdist.empty(shape, np.uint8, datadist=dd) if mem is None else mem
        assert self.mem.shape == shape
        self.mem.reshape(-1)[:] = pattern(seed, self.mem.size)
        self.image = self.mem.copy()
        addrs = [addr(self.mem[t, GUARD:]) for t in range(num_tensors)]
        desc = CacheDesc(num_tensors, [units, unit_bytes], DataType.DT_UINT8)
        cm = dd.cache_manager
        if blocks:
            self.cache = cm.register_blocks_cache(desc, addrs, key, remote_accessible)
        else:
            self.cache = cm.register_cache(desc, addrs, cache_keys, remote_accessible)

    def unit(self, image, tensor, index):
        """The bytes of block (or batch item) index of tensor in image (a view)."""
        start = GUARD + int(index) * self.unit_bytes
        return image[tensor, start:start + self.unit_bytes]

    def expected(self):
        return self.image.copy()

    def check(self, expected):
        if not np.array_equal(self.mem, expected):
            diff = np.argwhere(self.mem != expected)
            raise AssertionError(f"{len(diff)} bytes differ, first at (tensor, offset) "
                                 f"{tuple(diff[0])}; guard bytes are [0, {GUARD}) and the last "
                                 f"{GUARD} of each tensor")

    def check_untouched(self):
        self.check(self.image)


def copy_blocks(expected, dst, src, src_blocks, dst_blocks, tensor_pairs=None):
    """What moving src_blocks[i] of src into dst_blocks[i] of dst makes of expected (dst's
    image), for each (source tensor, destination tensor) of tensor_pairs (default: all, 1:1)."""
    if tensor_pairs is None:
        tensor_pairs = [(t, t) for t in range(expected.shape[0])]
    for st, dt in tensor_pairs:
        for s, d in zip(src_blocks, dst_blocks):
            dst.unit(expected, dt, d)[:] = src.unit(src.image, st, s)
    return expected


# What a transfer from a cache the other side does not have fails with: the cache is not there,
# or (where the daemon checks what the link exposes first) not exposed.
NOT_THERE = (LLMStatusCode.LLM_KV_CACHE_NOT_EXIST, LLMStatusCode.LLM_PERMISSION_DENIED) \
    if not SKIP_ALL else ()


def blocks_key(dd, model_id=0):
    return BlocksCacheKey(dd.cluster_id, model_id)
