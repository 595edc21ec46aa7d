#!/bin/sh
# SPDX-License-Identifier: MIT
# The demo across two daemons on loopback, as scripts/demo runs it without network namespaces:
# starts two $KVDISTD listening for peers on 127.0.0.1 (any port, a shared cluster key), runs
# "$@" --prefill-socket P --decode-socket D --prefill-address 127.0.0.1:0 --status-cmd ... (the
# prefill cluster listens on a port of its own, the decode cluster links to it there), and checks
# what only a transfer between the two daemons leaves behind: decode's daemon pulled and pushed the demo's bytes over a
# tcp link, and prefill's daemon served them. Fails if the command or either daemon failed.
set -eu

dir=$(mktemp -d)
pids=
cleanup() {
        for pid in $pids; do
                kill "$pid" 2>/dev/null || true
        done
        rm -rf "$dir"
}
trap cleanup EXIT

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/cluster.key"
chmod 600 "$dir/cluster.key"
for name in prefill decode; do
        mkdir "$dir/$name"
        "$KVDISTD" --socket "$dir/$name/kvdist.sock" --memory-size 64M --listen 127.0.0.1:0 \
                --cluster-key-file "$dir/cluster.key" >"$dir/$name/kvdistd.log" 2>&1 &
        pids="$pids $!"
        eval "${name}_pid=\$!"
        # Up when it answers; the ceiling (60 s, times $KVDIST_TEST_TIMEOUT_MULTIPLIER) is only
        # for a daemon that hangs.
        mult=${KVDIST_TEST_TIMEOUT_MULTIPLIER:-1}
        case $mult in '' | *[!0-9]*) mult=1 ;; esac
        limit=$((60 * mult))
        start=$(date +%s)
        until "$KVDISTCTL" --socket "$dir/$name/kvdist.sock" status >/dev/null 2>&1; do
                if [ $(($(date +%s) - start)) -gt "$limit" ] || ! kill -0 "$!" 2>/dev/null; then
                        echo "the $name kvdistd did not come up within $limit s:" >&2
                        cat "$dir/$name/kvdistd.log" >&2
                        exit 1
                fi
                sleep 0.05
        done
done

# While both workers are attached, decode's daemon has a tcp link out, prefill's the same link
# in, each daemon a ready peer, and the prefill cluster a listener of its own.
status='set -e
for s in "$KVDIST_PREFILL_SOCKET" "$KVDIST_DECODE_SOCKET"; do
        "$KVDISTCTL" --socket "$s" peers | tee /dev/stderr | grep -q " ready "
done
"$KVDISTCTL" --socket "$KVDIST_DECODE_SOCKET" links | tee /dev/stderr | grep -q " out .* tcp  *up "
"$KVDISTCTL" --socket "$KVDIST_PREFILL_SOCKET" links | tee /dev/stderr | grep -q " in .* tcp  *up "
"$KVDISTCTL" --socket "$KVDIST_PREFILL_SOCKET" clusters | tee /dev/stderr |
        grep -q "^1 .* 127\.0\.0\.1:[1-9]"'
rc=0
out=$("$DEMO" "$@" --prefill-socket "$dir/prefill/kvdist.sock" \
        --decode-socket "$dir/decode/kvdist.sock" --prefill-address 127.0.0.1:0 \
        --status-cmd "$status") || rc=$?
echo "$out"

"$KVDISTCTL" --socket "$dir/prefill/kvdist.sock" status --json >"$dir/prefill.json" || rc=1
"$KVDISTCTL" --socket "$dir/decode/kvdist.sock" status --json >"$dir/decode.json" || rc=1

drc=0
kill -TERM "$decode_pid" "$prefill_pid"
wait "$decode_pid" || drc=$?
wait "$prefill_pid" || drc=$?
pids=
if [ "$rc" -ne 0 ] || [ "$drc" -ne 0 ]; then
        echo "the demo exited $rc, a kvdistd exited $drc; the kvdistd logs:" >&2
        cat "$dir/prefill/kvdistd.log" "$dir/decode/kvdistd.log" >&2
        exit 1
fi
case $out in
*"across two kvdistd over TCP"*) ;;
*)
        echo "FAIL: the demo did not say it moved the blocks across two daemons" >&2
        exit 1
        ;;
esac
python3 - "$dir/prefill.json" "$dir/decode.json" <<'PY'
import json, sys

prefill = json.load(open(sys.argv[1]))["counters"]
decode = json.load(open(sys.argv[2]))["counters"]
print("prefill daemon:", prefill)
print("decode daemon:", decode)
# Two pulls and one push, all started on decode's daemon and served by prefill's.
assert decode["transfers_ok"] == 3 and decode["transfers_failed"] == 0, decode
assert decode["bytes_pulled"] > 0 and decode["bytes_pushed"] > 0, decode
assert prefill["transfers_ok"] == 0 and prefill["bytes_pulled"] == 0, prefill
assert prefill["transfers_served"] == 3, prefill
assert prefill["bytes_served"] == decode["bytes_pulled"] + decode["bytes_pushed"], (prefill, decode)
PY
