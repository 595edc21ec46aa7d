# SPDX-License-Identifier: MIT
"""LLM-DataDist's own samples (hicann/hixl examples/python/llm_datadist/*.py), run unchanged but
for the three edits llm_datadist_samples.port() makes (import, tensor placement, host
addresses), two processes on two kvdistd of this machine, every byte of every cache checked at
its end. Opt-in: the samples' licence does not let kvdist ship them, so
$KVDIST_LLM_DATADIST_SAMPLES must name a folder that holds them (a checkout's
examples/python/llm_datadist); without it every test skips saying so."""

import os
import random
import subprocess
import sys
import time

import numpy as np
import pytest

import llm_datadist_samples as S

SAMPLES_DIR = os.environ.get("KVDIST_LLM_DATADIST_SAMPLES")
DAEMON_PORT = 7400   # a rank table's bare "host_ip" means this port of that kvdistd
RUN_TIMEOUT_S = 600  # a generous ceiling on a loaded machine; runs end when both sides exit


def f32(value, n):
    return np.full(n, value, np.float32).view(np.uint8)


def f16(value, n):
    return np.full(n, value, np.float16).view(np.uint8)


def blocks(*values, floats=10):
    """One tensor of blocks of `floats` float32s each, block i all values[i]."""
    return np.concatenate([f32(v, floats) for v in values])


def both(tensor, n=2):
    return np.stack([tensor] * n)


def pool_image(cluster_id, cache_id, num_tensors, size):
    return S.pattern(S.pool_seed(cluster_id, cache_id), num_tensors * size).reshape(
        num_tensors, size)


def _rank_table_args(cluster_id):
    return ["--device_id", "0", "--cluster_id", str(cluster_id)]


def _host_args(role, local, remote, extra=()):
    return ["--device_id", "0", "--role", role, "--local_host_ip", local,
            "--remote_host_ip", remote, *extra]


# The samples that take --transfer_backend run once without it and once with "hixl".
BACKEND_SAMPLES = ("push_blocks_sample.py", "push_cache_sample.py",
                   "transfer_cache_async_sample.py")
RUNS = [(n, "") for n in S.SAMPLES] + [(n, "hixl") for n in BACKEND_SAMPLES]


# Each sample: the processes (which daemon, arguments), started in this order, a process
# waiting for a line of its predecessor's log where the sample itself sleeps instead of
# waiting (xPyD); and what every cache holds at its end, by (cluster id, cache id).
def spec(name, a, b, backend=""):
    if backend:
        processes, expected = spec(name, a, b)
        return ([(d, [*args, "--transfer_backend", backend], w) for d, args, w in processes],
                expected)
    ones2 = both(blocks(1, 1, 1))
    zeros2 = both(blocks(0, 0, 0))
    if name == "pull_cache_sample.py":
        size = 2 * 16 * 1024 * 2
        prompt = pool_image(1, 1, 4, size)
        return ([(0, _rank_table_args(1), None), (1, _rank_table_args(2), None)],
                {(1, 1): prompt, (2, 1): prompt})
    if name == "pull_from_cache_to_blocks.py":
        size = 2 * 16 * 1024 * 2
        prompt = pool_image(1, 1, 4, size)
        decoder = np.stack([np.concatenate([prompt[t, :size // 2], f16(1, 16 * 1024)])
                            for t in range(4)])
        return ([(0, _rank_table_args(1), None), (1, _rank_table_args(2), None)],
                {(1, 1): prompt, (2, 1): decoder})
    if name == "pull_blocks_sample.py":
        ones = f32(1, 2 * 1024 * 1024)[None]
        return ([(0, _rank_table_args(1), None), (1, _rank_table_args(2), None)],
                {(1, 1): ones, (2, 1): ones})
    if name == "hixl_transfer_backend_sample.py":
        return ([(0, _host_args("p", a, b), None), (1, _host_args("d", b, a), None)],
                {(0, 1): zeros2, (1, 1): zeros2})
    if name == "push_blocks_sample.py":
        return ([(0, _host_args("p", a, b), None), (1, _host_args("d", b, a), None)],
                {(0, 1): both(blocks(0, 1, 0)), (1, 1): zeros2})
    if name == "push_cache_sample.py":
        return ([(0, _host_args("p", a, b), None), (1, _host_args("d", b, a), None)],
                {(0, 1): both(blocks(1, 0, 0)), (1, 1): ones2})
    if name == "switch_role_sample.py":
        return ([(0, _host_args("p", a, b), None), (1, _host_args("d", b, a), None)],
                {(0, 1): both(blocks(1, 0, 1)), (1, 1): both(blocks(1, 0, 1))})
    if name == "transfer_cache_async_sample.py":
        return ([(0, _host_args("p", a, b), None), (1, _host_args("d", b, a), None)],
                {(0, 1): ones2, (1, 1): ones2})
    if name == "pull_blocks_xpyd_sample.py":
        # 2P1D: a prompt on each kvdistd, the decoder beside the second; it pulls blocks 0, 1
        # of each into its blocks 0, 2, the second prompt's last.
        p1, p2, d = f"{a}:26000", f"{b}:26002", f"{b}:26001"
        value = lambda ip_port: float(np.float32(S.ip_port_to_int(ip_port)))  # noqa: E731
        ready = "register_blocks_cache success"
        return ([(0, ["--device_id", "0", "--role", "p", "--local_ip_port", p1], None),
                 (1, ["--device_id", "0", "--role", "p", "--local_ip_port", p2], ready),
                 (1, ["--device_id", "0", "--role", "d", "--local_ip_port", d,
                      "--remote_ip_port", f"{p1};{p2}"], ready)],
                {(S.ip_port_to_int(p1), 1): blocks(*[value(p1)] * 3)[None],
                 (S.ip_port_to_int(p2), 1): blocks(*[value(p2)] * 3)[None],
                 (S.ip_port_to_int(d), 1): blocks(value(p2), 0, value(p2))[None]})
    raise AssertionError(name)


def _wait_for(path, line, proc):
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while line not in path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{path.name} never said {line!r}:\n{path.read_text(errors='replace')}")
        time.sleep(0.05)


@pytest.mark.skipif(not SAMPLES_DIR, reason="LLM-DataDist's samples are not shipped (CANN Open "
                    "Software License, for Huawei processors only): set "
                    "$KVDIST_LLM_DATADIST_SAMPLES to a folder holding them")
@pytest.mark.parametrize("name,backend", RUNS,
                         ids=[n + (f"-{b}" if b else "") for n, b in RUNS])
def test_sample(name, backend, daemons, tmp_path):
    source = os.path.join(SAMPLES_DIR, name)
    if not os.path.exists(source):
        pytest.fail(f"{source} is missing")
    # Two loopback addresses of their own, so that the samples' fixed ports (26000, 26001,
    # torch.distributed's 29500) and the daemons' 7400 are free whatever else runs here.
    net = f"127.{random.randrange(1, 255)}.{random.randrange(0, 256)}"
    hosts = (f"{net}.1", f"{net}.2")
    ds = [daemons(f"kvdistd-{i}", listen=f"{h}:{DAEMON_PORT}") for i, h in enumerate(hosts)]
    ported = tmp_path / name
    with open(source) as f:
        ported.write_text(S.port(name, f.read(), *hosts))
    procs, dumps = [], tmp_path / "dumps"
    dumps.mkdir()
    wrapper = os.path.join(os.path.dirname(__file__), "llm_datadist_samples.py")
    processes, expected = spec(name, *hosts, backend)
    logs = []
    for i, (daemon, args, wait_line) in enumerate(processes):
        if wait_line is not None:
            _wait_for(logs[-1], wait_line, procs[-1])
        log = tmp_path / f"process-{i}.log"
        logs.append(log)
        env = dict(os.environ, KVDIST_SOCKET=ds[daemon].socket, GLOO_SOCKET_IFNAME="lo")
        preload = env.get("LD_PRELOAD", "")
        if "libasan" in preload and "libstdc++" not in preload:
            # ASan preloaded before libstdc++ finds no __cxa_throw to forward to, and the C++
            # exceptions torch.distributed throws (gloo, as the samples end) abort the process.
            env["LD_PRELOAD"] = f"{preload} libstdc++.so.6"
        with open(log, "wb") as out:
            procs.append(subprocess.Popen([sys.executable, wrapper, str(dumps), str(ported),
                                           *args], stdout=out, stderr=subprocess.STDOUT,
                                          env=env, cwd=tmp_path))
    failures = []
    for proc, log in zip(procs, logs):
        try:
            rc = proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "killed after the ceiling"
        if rc != 0:
            failures.append(f"{log.name} ({rc}):\n{log.read_text(errors='replace')[-4000:]}")
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not failures, "\n".join(failures)
    for (cluster, cache_id), image in expected.items():
        path = dumps / f"c{cluster}-{cache_id}.npy"
        assert path.exists(), f"cache {cache_id} of cluster {cluster} was not recorded"
        got = np.load(path)
        assert got.shape == image.shape, f"{path.name}: {got.shape} != {image.shape}"
        if not np.array_equal(got, image):
            where = np.argwhere(got != image)
            raise AssertionError(f"{path.name}: {len(where)} bytes differ, first at (tensor, "
                                 f"byte) {tuple(where[0])}")
