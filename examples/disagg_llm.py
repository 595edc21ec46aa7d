#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Prefill on one node, decode on another, the KV cache moved by kvdist.

Runs the small model of tiny_llm.py disaggregated: two kvdistd (A and B; as root, where
`ip netns` works, each in its own network namespace joined by a veth pair, two "hosts"), a
prefill worker attached to A and a decode worker attached to B. The decode worker registers
its paged KV cache (kvdist memory) and waits; the prefill worker links to it, computes the
prompt's KV layer by layer and pushes it into the decode worker's blocks; the decode worker,
told by a notification that every block landed, decodes 32 tokens greedily. They must be the
tokens of a single-process run of the same model (checked, and so is every KV byte).

It runs twice: pushing each layer as soon as it is computed (transfer_cache_async() with a
layer synchronizer), and pushing everything once prefill finished (push_blocks()), and prints
how long the decode side waited for the KV after prefill finished, next to the prefill time.

    PYTHONPATH=build/client-lib/python examples/disagg_llm.py --kvdistd build/daemon/kvdistd

This driver plays the router: it starts everything, tells each worker what to do on its stdin
and reads what they report on their stdout (one JSON object a line). Exit status 0 when the
tokens and the KV matched, 1 otherwise.
"""

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import torch

import kvdist
from kvdist import (BlocksCacheKey, CacheDesc, DataType, LayerSynchronizer, LLMClusterInfo,
                    LLMDataDist, LLMRole, LLMStatusCode, TransferWithCacheKeyConfig)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_llm import BLOCK, Config, TinyLLM, prompt_tokens  # noqa: E402

PREFILL_ID, DECODE_ID = 1, 2
PROMPT_LEN, STEPS = 256, 32
POOL_BLOCKS = 48  # per worker: room for two rounds of 18 blocks
STEP_TIMEOUT_S = 300


def blocks_needed(length):
    return (length + BLOCK - 1) // BLOCK


def kv_desc(config):
    shape = config.kv_shape(POOL_BLOCKS)
    return CacheDesc(shape[0], list(shape[1:]), DataType.DT_FLOAT)


def warm_up(model, config):
    """One prefill and a few decode steps on scratch memory, so that torch's first-call costs
    are not in the timings of the first round."""
    scratch = torch.zeros(config.kv_shape(blocks_needed(PROMPT_LEN + 4)))
    table = list(range(scratch.shape[1]))
    first = model.prefill(prompt_tokens(config, PROMPT_LEN), scratch, table)
    model.generate(first, PROMPT_LEN, 4, scratch, table)


def start_worker(args, role, cluster_id):
    """A worker: the model (warmed up), and this process as a cluster of its node's daemon
    with its KV cache in kvdist memory. Returns (model, dd, kv, cache)."""
    torch.set_num_threads(1)
    config = Config()
    model = TinyLLM(config)
    warm_up(model, config)
    dd = LLMDataDist(role, cluster_id)
    # Other clusters link to this one at its daemon's peer address.
    dd.init({"ge.exec.deviceId": "0", "socket_path": args.socket,
             "llm.listenIpInfo": args.listen, "llm.SyncKvCacheWaitTime": "30000"})
    kv = kvdist.empty_torch(config.kv_shape(POOL_BLOCKS), torch.float32, datadist=dd)
    cache = dd.cache_manager.register_blocks_cache(
        kv_desc(config), [t.data_ptr() for t in kv], BlocksCacheKey(cluster_id))
    return model, dd, kv, cache


def report(**fields):
    print(json.dumps(fields), flush=True)


def commands():
    for line in sys.stdin:
        yield json.loads(line)


class LayerGate(LayerSynchronizer):
    """The engine's side of transfer_cache_async(): layer i may go once prefill computed it."""

    def __init__(self, layers):
        self.ready = [threading.Event() for _ in range(layers)]

    def layer_done(self, layer):
        self.ready[layer].set()

    def synchronize_layer(self, layer_index, timeout_in_millis):
        return self.ready[layer_index].wait(STEP_TIMEOUT_S)


def prefill_worker(args):
    model, dd, kv, cache = start_worker(args, LLMRole.PROMPT, PREFILL_ID)
    decode = LLMClusterInfo()
    decode.remote_cluster_id = DECODE_ID
    decode.remote_role_type = LLMRole.DECODER
    ip, port = args.peer.rsplit(":", 1)
    decode.append_remote_ip_info(ip, int(port))
    ret, _ = dd.link_clusters([decode], 10000)
    if ret != LLMStatusCode.LLM_SUCCESS:
        raise SystemExit(f"prefill: cannot link to the decode cluster: {ret.name}: "
                         f"{dd.last_error}")
    report(ready=True)
    tokens = prompt_tokens(model.c, PROMPT_LEN)
    table = list(range(blocks_needed(PROMPT_LEN)))
    cm = dd.cache_manager
    for cmd in commands():
        if cmd["op"] == "quit":
            break
        dst = BlocksCacheKey(DECODE_ID)
        note = json.dumps({"round": cmd["round"]}).encode()
        if cmd["layerwise"]:
            gate = LayerGate(model.c.layers)
            every = range(model.c.layers)  # layer i to layer i
            task = cm.transfer_cache_async(cache, gate,
                                           [TransferWithCacheKeyConfig(dst, every, every)],
                                           table, cmd["dst_blocks"], notify=note)
            start = time.monotonic()
            first = model.prefill(tokens, kv, table, gate.layer_done)
            done = time.monotonic()
            task.wait()
        else:
            start = time.monotonic()
            first = model.prefill(tokens, kv, table)
            done = time.monotonic()
            cm.push_blocks(dst, cache, table, cmd["dst_blocks"], notify=note)
        report(round=cmd["round"], start=start, done=done, first_token=first)
    dd.finalize()


def decode_worker(args):
    model, dd, kv, _ = start_worker(args, LLMRole.DECODER, DECODE_ID)
    fd = dd.notify_fd()
    report(ready=True)
    for cmd in commands():
        if cmd["op"] == "quit":
            break
        if cmd["op"] == "wait":
            # Waits for the notification that every block landed, and notes when it came.
            report(waiting=True)
            notes = []
            while not notes:
                select.select([fd], [], [], STEP_TIMEOUT_S)
                notes = dd.get_notifies()
            arrived = time.monotonic()
            assert [json.loads(n.data) for n in notes] == [{"round": cmd["round"]}], notes
            report(round=cmd["round"], kv_ready=arrived)
        elif cmd["op"] == "decode":
            table = cmd["blocks"]
            digest = model.kv_digest(kv, table, PROMPT_LEN)
            start = time.monotonic()
            out = model.generate(cmd["first_token"], PROMPT_LEN, STEPS, kv, table)
            report(round=cmd["round"], tokens=out, kv_digest=digest,
                   decode_s=time.monotonic() - start)
    dd.finalize()


def reference_run():
    """The same model in one process, no kvdist: the tokens and the KV to match."""
    config = Config()
    model = TinyLLM(config)
    kv = torch.zeros(config.kv_shape(blocks_needed(PROMPT_LEN + STEPS)))
    table = list(range(kv.shape[1]))
    first = model.prefill(prompt_tokens(config, PROMPT_LEN), kv, table)
    digest = model.kv_digest(kv, table, PROMPT_LEN)
    return model.generate(first, PROMPT_LEN, STEPS, kv, table), digest


# --- the driver -----------------------------------------------------------------------------


class Hosts:
    """Two places to run a daemon and a worker: network namespaces joined by a veth pair when
    root and `ip netns` work, else this host's loopback."""

    def __init__(self, want):
        self.ns = [None, None]
        self.addrs = ["127.0.0.1:0", "127.0.0.1:0"]
        self.why = None
        if want == "off":
            self.why = "asked not to (--netns off)"
        elif os.geteuid() != 0:
            self.why = "not root"
        elif not shutil.which("ip"):
            self.why = "no ip command (iproute2)"
        else:
            self._setup()
        if want == "on" and self.why:
            raise SystemExit(f"cannot run in network namespaces: {self.why}")

    def _ip(self, *args):
        return subprocess.run(["ip", *args], capture_output=True, text=True)

    def _setup(self):
        pid, k = os.getpid(), os.getpid() % 250 + 1
        ns = [f"kvd-llm-p-{pid}", f"kvd-llm-d-{pid}"]
        veth = [f"kvlp{pid % 100000}", f"kvld{pid % 100000}"]
        ips = [f"10.79.{k}.1", f"10.79.{k}.2"]
        steps = [("netns", "add", ns[0]), ("netns", "add", ns[1]),
                 ("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])]
        for i in range(2):
            steps += [("link", "set", veth[i], "netns", ns[i]),
                      ("-n", ns[i], "addr", "add", f"{ips[i]}/24", "dev", veth[i]),
                      ("-n", ns[i], "link", "set", "lo", "up"),
                      ("-n", ns[i], "link", "set", veth[i], "up")]
        for step in steps:
            r = self._ip(*step)
            if r.returncode != 0:
                self.why = f"ip {' '.join(step)} failed: {r.stderr.strip()}"
                self.cleanup()
                return
            if step[:2] == ("netns", "add"):
                self.ns[ns.index(step[2])] = step[2]
        self.addrs = [f"{ips[0]}:7400", f"{ips[1]}:7400"]

    def run(self, i, argv):
        return ["ip", "netns", "exec", self.ns[i], *argv] if self.ns[i] else argv

    def describe(self, i):
        return f"network namespace {self.ns[i]}" if self.ns[i] else "this host's loopback"

    def cleanup(self):
        for i, name in enumerate(self.ns):
            if name:
                self._ip("netns", "del", name)
            self.ns[i] = None


class Daemon:
    def __init__(self, kvdistd, hosts, i, directory, key):
        self.socket = os.path.join(directory, f"kvdistd-{i}.sock")
        self.log_path = os.path.join(directory, f"kvdistd-{i}.log")
        env = dict(os.environ)
        # kvdistd links its own sanitizer runtime when it has one; the interpreter's preload
        # and options are not for it.
        env.pop("LD_PRELOAD", None)
        if "KVDIST_DAEMON_ASAN_OPTIONS" in env:
            env["ASAN_OPTIONS"] = env["KVDIST_DAEMON_ASAN_OPTIONS"]
        argv = [kvdistd, "--socket", self.socket, "--listen", hosts.addrs[i],
                "--cluster-key-file", key, "--memory-size", "0"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(hosts.run(i, argv), stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.peer_addr = kvdist.daemon_status(self.socket)["peer_listen"]
                return
            except kvdist.LLMException:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"kvdistd did not come up:\n{self.log()}")
                time.sleep(0.02)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        """SIGTERM; True when it exited with 0 and its log has no sanitizer report."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        log = self.log()
        ok = self.proc.returncode == 0 and "Sanitizer" not in log and "runtime error:" not in log
        if not ok:
            print(f"kvdistd exited with {self.proc.returncode}:\n{log}", file=sys.stderr)
        return ok


class Worker:
    def __init__(self, hosts, i, role, socket, listen, peer=None):
        argv = [sys.executable, os.path.abspath(__file__), "--worker", role, "--socket", socket,
                "--listen", listen]
        if peer:
            argv += ["--peer", peer]
        self.name = role
        self.proc = subprocess.Popen(hosts.run(i, argv), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def send(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def read(self):
        ready, _, _ = select.select([self.proc.stdout], [], [], STEP_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise SystemExit(f"the {self.name} worker stopped answering "
                             f"(exit status {self.proc.poll()})")
        return json.loads(line)

    def finish(self):
        if self.proc.poll() is None:
            try:
                self.send(op="quit")
                self.proc.wait(60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode == 0


def serve(args, hosts, directory):
    key = os.path.join(directory, "cluster.key")
    with open(key, "w") as f:
        f.write(os.urandom(32).hex())
    os.chmod(key, 0o600)
    daemons, workers = [], []
    ok = True
    try:
        daemons = [Daemon(args.kvdistd, hosts, i, directory, key) for i in range(2)]
        decode = Worker(hosts, 1, "decode", daemons[1].socket, daemons[1].peer_addr)
        workers.append(decode)
        decode.read()
        prefill = Worker(hosts, 0, "prefill", daemons[0].socket, daemons[0].peer_addr,
                         daemons[1].peer_addr)
        workers.append(prefill)
        prefill.read()

        config = Config()
        print(f"model: {config.layers} layers, d_model {config.dim}, {config.heads} query heads "
              f"sharing {config.kv_heads} K/V heads, {BLOCK}-token KV blocks; "
              f"{PROMPT_LEN}-token prompt, {STEPS} tokens decoded")
        print(f"prefill: cluster {PREFILL_ID} on kvdistd {daemons[0].peer_addr} "
              f"({hosts.describe(0)})")
        print(f"decode:  cluster {DECODE_ID} on kvdistd {daemons[1].peer_addr} "
              f"({hosts.describe(1)})")
        if hosts.why:
            print(f"(one host: {hosts.why})")
        expected_tokens, expected_digest = reference_run()

        rows = []
        n = blocks_needed(PROMPT_LEN + STEPS)
        for rnd, layerwise in enumerate((False, True)):
            # The decode side's blocks for this request, scattered over its pool.
            blocks = [POOL_BLOCKS - 1 - 2 * j - rnd for j in range(n)]
            decode.send(op="wait", round=rnd)
            decode.read()
            prefill.send(op="prefill", round=rnd, layerwise=layerwise,
                         dst_blocks=blocks[:blocks_needed(PROMPT_LEN)])
            p = prefill.read()
            kv = decode.read()
            decode.send(op="decode", round=rnd, first_token=p["first_token"], blocks=blocks)
            d = decode.read()
            rows.append(("layer by layer" if layerwise else "after prefill",
                         p["done"] - p["start"], kv["kv_ready"] - p["done"], d["decode_s"]))
            if d["tokens"] != expected_tokens or d["kv_digest"] != expected_digest:
                print(f"MISMATCH ({rows[-1][0]}): tokens {d['tokens']}, expected "
                      f"{expected_tokens}; KV digest {d['kv_digest']}, expected "
                      f"{expected_digest}")
                ok = False

        print(f"{'KV pushed':<16}{'prefill':>12}{'decode waited for KV':>24}"
              f"{'decode, ' + str(STEPS) + ' tokens':>22}")
        print(f"{'':<16}{'':>12}{'after prefill finished':>24}")
        for name, prefill_s, wait_s, decode_s in rows:
            print(f"{name:<16}{prefill_s * 1e3:>9.1f} ms{max(0.0, wait_s) * 1e3:>21.2f} ms"
                  f"{decode_s * 1e3:>19.1f} ms")
        for name, _, wait_s, _ in rows:
            if wait_s < 0:
                print(f"({name}: all the KV was in place {-wait_s * 1e3:.2f} ms before "
                      f"prefill finished)")
        print("tokens: " + " ".join(map(str, expected_tokens)))
        if ok:
            print(f"both runs decoded exactly the tokens of a single-process run, from "
                  f"byte-identical KV")
    finally:
        for w in workers:
            ok = w.finish() and ok
        for d in daemons:
            ok = d.stop() and ok
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kvdistd", default=os.environ.get("KVDISTD") or "kvdistd",
                        help="the kvdistd binary (default: $KVDISTD, then kvdistd on PATH)")
    parser.add_argument("--netns", choices=("auto", "on", "off"), default="auto",
                        help="run the two hosts in network namespaces (auto: when root)")
    parser.add_argument("--worker", choices=("prefill", "decode"), help=argparse.SUPPRESS)
    parser.add_argument("--socket", help=argparse.SUPPRESS)
    parser.add_argument("--listen", help=argparse.SUPPRESS)
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "prefill":
        return prefill_worker(args)
    if args.worker == "decode":
        return decode_worker(args)

    torch.set_num_threads(1)  # as the workers: the same arithmetic in every process
    if not shutil.which(args.kvdistd) and not os.access(args.kvdistd, os.X_OK):
        raise SystemExit(f"no kvdistd at {args.kvdistd} (--kvdistd)")
    hosts = Hosts(args.netns)
    try:
        with tempfile.TemporaryDirectory(prefix="kvdist-llm-") as directory:
            ok = serve(args, hosts, directory)
    finally:
        hosts.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
