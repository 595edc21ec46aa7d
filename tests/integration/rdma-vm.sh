#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# rdma-vm: runs the cross-daemon integration suites over RDMA, inside a VM with a real soft-RoCE
# device (the rxe-vm tool boots Debian's kernel with rdma_rxe under QEMU; no RDMA hardware or
# host kernel support needed). Every node then maps device_id 0 to rxe0 with transport rdma
# ($KVDIST_RDMA_DEVICE), so the same byte-exact tests, faults and hostile peer run over RDMA
# READ/WRITE instead of TCP.
#
# Usage: rdma-vm.sh BUILD_DIR TEST...   (test executables relative to BUILD_DIR)
# Exits 77 (skipped) with a reason when the VM tool cannot be found or cannot start here.
set -uo pipefail

build=$(cd "$1" && pwd)
shift

# The tool: $KVDIST_RXE_VM, else the workspace's shared copy next to the checkout.
src=$(cd "$(dirname "$0")/../.." && pwd)
rxe=${KVDIST_RXE_VM:-}
for candidate in "$src/../shared/rxe-vm/rxe-vm" /work/shared/rxe-vm/rxe-vm; do
        [ -n "$rxe" ] && break
        [ -x "$candidate" ] && rxe=$candidate
done
if [ -z "$rxe" ] || [ ! -x "$rxe" ]; then
        echo "SKIP: no rxe-vm tool (set KVDIST_RXE_VM to its path): the RDMA suites need a" \
             "soft-RoCE VM and this host has no RDMA device"
        exit 77
fi

# The tool builds its cache (kernel, modules, base initramfs) on first use. That build can die
# of a SIGPIPE inside the tool (a `grep | head` under pipefail) depending on timing: it is
# tried up to three times here, before any test runs, so that a fresh machine's first run
# tests kvdist instead of the tool. A cache that cannot be built is a skip, said so.
built=no
for attempt in 1 2 3; do
        if "$rxe" build >/dev/null 2>&1; then
                built=yes
                break
        fi
        echo "rdma-vm: building the rxe-vm cache failed (attempt $attempt of 3)"
done
if [ "$built" != yes ]; then
        echo "SKIP: rxe-vm could not build its VM image here (\`$rxe build\` failed 3 times;" \
             "run it by hand to see why): the RDMA suites need the soft-RoCE VM"
        exit 77
fi

tests=()
for t in "$@"; do
        tests+=("$build/$t")
done
script='rc=0
for t in '"${tests[*]}"'; do
        echo "== $t over RDMA ($KVDIST_RDMA_DEVICE)"
        "$t" || rc=1
        # A failed test leaves its daemons to the harness watchers, which print their logs:
        # let them finish before the VM powers off.
        n=0
        while pgrep -x kvdist-watch >/dev/null 2>&1 && [ $n -lt 150 ]; do
                sleep 0.2
                n=$((n + 1))
        done
done
exit $rc'

out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$rxe" run --timeout 840 --files "$build" --env KVDISTD="$build/daemon/kvdistd" \
        --env KVDISTCTL="$build/tools/kvdistctl" \
        --env KVDIST_RDMA_DEVICE=rxe0 --env ASAN_OPTIONS --env UBSAN_OPTIONS \
        -- sh -c "$script" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
# 125: the VM or its rxe device could not be set up here (no QEMU, no image): a skip, said so.
if [ "$rc" -eq 125 ]; then
        echo "SKIP: rxe-vm could not start the soft-RoCE VM on this host (exit 125; see above)"
        exit 77
fi
exit "$rc"
