#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs a command against a private kvdistd: starts $KVDISTD on a socket in a temp dir, exports
# KVDIST_SOCKET, runs "$@", stops the daemon and fails if either failed.
set -eu

dir=$(mktemp -d)
sock="$dir/kvdist.sock"
"$KVDISTD" --socket "$sock" --memory-size 64M >"$dir/kvdistd.log" 2>&1 &
pid=$!
cleanup() {
        kill "$pid" 2>/dev/null || true
        rm -rf "$dir"
}
trap cleanup EXIT

i=0
until [ -S "$sock" ]; do
        i=$((i + 1))
        if [ "$i" -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
                echo "kvdistd did not come up:" >&2
                cat "$dir/kvdistd.log" >&2
                exit 1
        fi
        sleep 0.05
done

export KVDIST_SOCKET="$sock"
rc=0
"$@" || rc=$?

kill -TERM "$pid"
drc=0
wait "$pid" || drc=$?
if [ "$rc" -ne 0 ] || [ "$drc" -ne 0 ]; then
        echo "command exited $rc, kvdistd exited $drc; kvdistd log:" >&2
        cat "$dir/kvdistd.log" >&2
        exit 1
fi
