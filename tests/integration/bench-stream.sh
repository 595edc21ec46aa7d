#!/bin/sh
# SPDX-License-Identifier: MIT
# kvdist-bench --inflight N as users run it, on small sizes: N requests kept in flight. The
# benchmark verifies every byte itself; this checks its JSON: every case verified, the stream's
# rates set, and the requests really overlapped (by Little's law, the sum of the requests'
# latencies over the streams' time is the mean number in flight: about N, 1 when each request
# waited for the one before).
#   bench-stream.sh N BENCH ARGS...
set -eu

inflight=$1
bench=$2
shift 2

out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bench" "$@" --inflight "$inflight" --json >"$out"
cat "$out"
python3 - "$out" "$inflight" <<'PY'
import json, sys

doc = json.load(open(sys.argv[1]))
inflight = int(sys.argv[2])
assert doc["inflight"] == inflight, doc
assert doc["cases"], "no case ran"
for c in doc["cases"]:
    assert c["verified"] is True, c
    for key in ("kvdist_gbps", "kvdist_gbps_median", "requests_per_s"):
        assert isinstance(c[key], float) and c[key] > 0, (key, c)
    if doc["baseline"] == "memcpy":
        for key in ("ratio", "ratio_median", "ratio_scattered", "ratio_scattered_median"):
            assert isinstance(c[key], float) and c[key] > 0, (key, c)
    # the stream's rate and its request rate come from the same time
    rate = c["bytes_per_request"] * c["requests_per_s"] / 1e9
    assert abs(rate - c["kvdist_gbps"]) <= 1e-3 * c["kvdist_gbps"], (rate, c)
    lat = c["latency_us"]
    assert 0 < lat["p50"] <= lat["p99"], c
    in_flight = lat["mean"] * 1e-6 * c["requests_per_s"]
    assert in_flight > min(1.5, inflight - 0.5), ("requests did not overlap", in_flight, c)
    assert in_flight <= inflight + 0.05, ("more in flight than asked", in_flight, c)
PY
