#!/bin/sh
# SPDX-License-Identifier: MIT
# kvdist-bench --remote as users run it, on small sizes; the benchmark itself verifies every byte.
#   bench-remote.sh iperf3 BENCH ARGS...     the iperf3 baseline, --json checked; skips (77)
#                                            when iperf3 is not installed
#   bench-remote.sh no-iperf3 BENCH ARGS...  an iperf3 that does not exist: exit status 3 and a
#                                            message that names iperf3, before any daemon starts
#   bench-remote.sh ucx BENCH ARGS...        the ucx_perftest baseline, --json checked; skips
#                                            (77) when ucx_perftest is not installed
#   bench-remote.sh no-ucx BENCH ARGS...     a ucx_perftest that does not exist: exit status 3
#                                            and a message that names it and ucx-utils
set -eu

mode=$1
bench=$2
shift 2

case $mode in
iperf3)
        if ! command -v iperf3 >/dev/null 2>&1; then
                echo "SKIP: iperf3 is not installed (scripts/setup-deps installs it)"
                exit 77
        fi
        out=$(mktemp)
        trap 'rm -f "$out"' EXIT
        "$bench" "$@" --baseline iperf3 --json >"$out"
        cat "$out"
        # Every case verified, with a kvdist and an iperf3 rate and their ratio.
        python3 - "$out" <<'PY'
import json, sys

doc = json.load(open(sys.argv[1]))
assert doc["remote"] is True and doc["baseline"] == "iperf3", doc
assert doc["cases"], "no case ran"
for c in doc["cases"]:
    assert c["verified"] is True, c
    for key in ("kvdist_gbps", "kvdist_gbps_median", "iperf3_gbps", "iperf3_gbps_median",
                "ratio", "ratio_median"):
        assert isinstance(c[key], float) and c[key] > 0, (key, c)
    # each daemon's control loop handled the request: some CPU time, read from its main thread
    loop = c["loop_cpu_us"]
    assert sorted(loop) == ["decode", "prefill"], c
    assert all(isinstance(v, float) and v > 0 for v in loop.values()), c
PY
        ;;
no-iperf3)
        rc=0
        errfile=$(mktemp)
        "$bench" "$@" --baseline iperf3 --iperf3 /nonexistent/iperf3 2>"$errfile" || rc=$?
        err=$(cat "$errfile")
        rm -f "$errfile"
        echo "$err"
        if [ "$rc" -ne 3 ]; then
                echo "FAIL: kvdist-bench exited $rc without iperf3, expected 3" >&2
                exit 1
        fi
        case $err in
        *"iperf3 not found"*) ;;
        *)
                echo "FAIL: kvdist-bench did not say that iperf3 is missing" >&2
                exit 1
                ;;
        esac
        ;;
ucx)
        if ! command -v ucx_perftest >/dev/null 2>&1; then
                echo "SKIP: ucx_perftest is not installed (ucx-utils; scripts/setup-deps installs it)"
                exit 77
        fi
        out=$(mktemp)
        trap 'rm -f "$out"' EXIT
        "$bench" "$@" --baseline ucx --json >"$out"
        cat "$out"
        python3 - "$out" <<'PY'
import json, sys

doc = json.load(open(sys.argv[1]))
assert doc["remote"] is True and doc["baseline"] == "ucx", doc
assert doc["cases"], "no case ran"
for c in doc["cases"]:
    assert c["verified"] is True, c
    for key in ("kvdist_gbps", "ucx_gbps", "ucx_gbps_median", "ratio", "ratio_median"):
        assert isinstance(c[key], float) and c[key] > 0, (key, c)
PY
        ;;
no-ucx)
        rc=0
        errfile=$(mktemp)
        "$bench" "$@" --baseline ucx --ucx-perftest /nonexistent/ucx_perftest 2>"$errfile" || rc=$?
        err=$(cat "$errfile")
        rm -f "$errfile"
        echo "$err"
        if [ "$rc" -ne 3 ]; then
                echo "FAIL: kvdist-bench exited $rc without ucx_perftest, expected 3" >&2
                exit 1
        fi
        case $err in
        *"ucx_perftest not found"*ucx-utils*) ;;
        *)
                echo "FAIL: kvdist-bench did not say that ucx_perftest (ucx-utils) is missing" >&2
                exit 1
                ;;
        esac
        ;;
*)
        echo "bench-remote.sh: unknown mode $mode" >&2
        exit 2
        ;;
esac
