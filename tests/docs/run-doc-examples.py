#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""run-doc-examples: runs the documentation's example pairs as a reader would, each on a
private kvdistd: a Python prefill worker (extracted from its page here) serves its blocks, and a
decode worker pulls them and checks every byte, including that the blocks it did not pull stayed
zero: a C program (extracted and built by meson) or a Python one from the same page. Every wait
ends on readiness (the socket answering, the prefill worker's "serving" line), with a generous
ceiling for loaded machines.

Usage: run-doc-examples.py KVDISTD EXTRACT-EXAMPLE.py CASE...
  CASE is PAGE.md|PREFILL-MARKER|DECODE, DECODE a built program or py:MARKER (a block of PAGE);
  a marker is how the example's code block starts ("# prefill.py:").
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

# Ceilings, not expectations: a loaded CI machine (or a sanitizer build) may be slow.
CEILING_S = 120 * float(os.environ.get("KVDIST_TEST_TIMEOUT_MULTIPLIER", "1"))


def fail(what, *logs):
    print(f"run-doc-examples: FAIL: {what}")
    for name, path in logs:
        if os.path.exists(path):
            print(f"--- {name}:")
            with open(path, errors="replace") as fh:
                print(fh.read()[-8000:])
    sys.exit(1)


def daemon_env():
    """What the daemon and the C program get: no ASan preload, leak detection on."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if "KVDIST_DAEMON_ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] = env["KVDIST_DAEMON_ASAN_OPTIONS"]
    return env


def wait_for_socket(path, proc, log):
    deadline = time.monotonic() + CEILING_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(f"kvdistd exited with status {proc.returncode} before it answered",
                 ("kvdistd log", log))
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(path)
                return
        except OSError:
            time.sleep(0.05)
    fail(f"kvdistd did not answer on {path} within {CEILING_S:.0f} s", ("kvdistd log", log))


def extract(extractor, page, marker, out):
    subprocess.run([sys.executable, extractor, page, marker, out], check=True)


def run_case(kvdistd, extractor, case, tmp):
    page, prefill_marker, decode = case.split("|")
    prefill_py = os.path.join(tmp, "prefill.py")
    extract(extractor, page, prefill_marker, prefill_py)
    if decode.startswith("py:"):
        decode_py = os.path.join(tmp, "decode.py")
        extract(extractor, page, decode[3:], decode_py)
        decode_cmd, decode_env = ["/usr/bin/python3", decode_py], dict(os.environ)
    else:
        decode_cmd, decode_env = [decode], daemon_env()
    sock = os.path.join(tmp, "kvdist.sock")
    dlog = os.path.join(tmp, "kvdistd.log")
    plog = os.path.join(tmp, "prefill.log")
    env = dict(os.environ, KVDIST_SOCKET=sock)
    print(f"== {page}: {prefill_marker} and {decode}")
    with open(dlog, "w") as dl:
        daemon = subprocess.Popen([kvdistd, "--socket", sock, "--memory-size", "64M"],
                                  stdout=dl, stderr=subprocess.STDOUT, env=daemon_env())
    prefill = None
    try:
        wait_for_socket(sock, daemon, dlog)
        with open(plog, "w") as pl:
            prefill = subprocess.Popen(["/usr/bin/python3", prefill_py], env=env,
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=pl, text=True)
        line = prefill.stdout.readline()  # blocks until the worker serves, or exits
        if "prefill: serving" not in line:
            prefill.wait(CEILING_S)
            fail(f"the prefill worker did not start serving (said {line!r}, exit status "
                 f"{prefill.returncode})", ("prefill.py", plog), ("kvdistd log", dlog))
        print(f"prefill.py: {line.strip()}")

        r = subprocess.run(decode_cmd, env=dict(decode_env, KVDIST_SOCKET=sock),
                           capture_output=True, text=True, timeout=CEILING_S)
        print(f"decode: exit status {r.returncode}\n{r.stdout}{r.stderr}", end="")
        if r.returncode != 0 or "decode: pulled 3 blocks of 64 tensors" not in r.stdout:
            fail("the decode worker failed or found wrong bytes",
                 ("kvdistd log", dlog), ("prefill.py", plog))

        prefill.terminate()  # SIGTERM: the worker's cue to finalize
        if prefill.wait(CEILING_S) != 0:
            fail(f"prefill.py exited with status {prefill.returncode}",
                 ("prefill.py", plog), ("kvdistd log", dlog))
    finally:
        if prefill is not None and prefill.poll() is None:
            prefill.kill()
            prefill.wait()
        daemon.terminate()
        try:
            drc = daemon.wait(CEILING_S)
        except subprocess.TimeoutExpired:
            daemon.kill()
            drc = daemon.wait()
    if drc != 0:
        fail(f"kvdistd exited with status {drc}", ("kvdistd log", dlog))


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip().split("\n\n")[-1], file=sys.stderr)
        return 2
    kvdistd, extractor, cases = argv[1], argv[2], argv[3:]
    if os.environ.get("KVDIST_PYTHON_SKIP"):
        print(f"SKIP: {os.environ['KVDIST_PYTHON_SKIP']}")
        return 77
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="kvdist-doc-example-") as tmp:
            run_case(kvdistd, extractor, case, tmp)
    print(f"run-doc-examples: {len(cases)} example pairs ran; every byte checked")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
