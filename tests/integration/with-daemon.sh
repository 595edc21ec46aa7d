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

# Up when the socket is there; the ceiling (60 s, times $KVDIST_TEST_TIMEOUT_MULTIPLIER) is only
# for a daemon that hangs, never for a loaded machine.
mult=${KVDIST_TEST_TIMEOUT_MULTIPLIER:-1}
case $mult in '' | *[!0-9]*) mult=1 ;; esac
limit=$((60 * mult))
start=$(date +%s)
until [ -S "$sock" ]; do
        if [ $(($(date +%s) - start)) -gt "$limit" ] || ! kill -0 "$pid" 2>/dev/null; then
                echo "kvdistd did not come up within $limit s:" >&2
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
