#!/bin/sh
# SPDX-License-Identifier: MIT
# check-units: the systemd units and snippets as systemd itself reads them.
#   check-units.sh SERVICE SOCKET SYSUSERS TMPFILES KVDISTD
# SERVICE is the built kvdistd.service; its ExecStart names the installed daemon, which need not
# exist here, so a copy with the built KVDISTD in its place is checked. Runs
# `systemd-analyze verify`, requires `systemd-analyze security` exposure <= 3.0, checks the
# directives the operations issue asks for, and applies the sysusers and tmpfiles snippets to a
# scratch root. Exits 77 (skip) without systemd-analyze.
set -eu

service=$1 socket=$2 sysusers=$3 tmpfiles=$4 kvdistd=$5

if ! command -v systemd-analyze >/dev/null 2>&1; then
        echo "SKIP: systemd-analyze is not installed (Debian package systemd; scripts/setup-deps installs it)"
        exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
        echo "check-units: FAIL: $*" >&2
        exit 1
}

sed "s|^ExecStart=[^ ]*|ExecStart=$kvdistd|" "$service" >"$tmp/kvdistd.service"
cp "$socket" "$tmp/kvdistd.socket"

echo "== systemd-analyze verify"
systemd-analyze verify --man=no "$tmp/kvdistd.service" "$tmp/kvdistd.socket" ||
        fail "systemd-analyze verify found problems (above)"

echo "== systemd-analyze security"
rc=0
systemd-analyze security --offline=true --threshold=30 "$tmp/kvdistd.service" \
        >"$tmp/security.txt" 2>&1 || rc=$?
grep -E '^(✗|→)' "$tmp/security.txt" || true
[ "$rc" -eq 0 ] || fail "exposure is above 3.0 (systemd-analyze security exited $rc)"
grep -q 'Overall exposure level for kvdistd.service: [0-2]\.[0-9] \|Overall exposure level for kvdistd.service: 3\.0 ' \
        "$tmp/security.txt" || fail "no exposure level at or below 3.0 in the report"

echo "== directives"
for d in Type=notify WatchdogSec= Restart=on-failure RuntimeDirectory=kvdist \
        LimitMEMLOCK=infinity User=kvdist Group=kvdist ProtectSystem=strict ProtectHome=yes \
        PrivateTmp=yes NoNewPrivileges=yes \
        'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK' \
        SystemCallFilter=@system-service 'DeviceAllow=char-infiniband_verbs rw' \
        LimitNICE=-10 SystemCallFilter=setpriority; do
        grep -qx "$d.*" "$tmp/kvdistd.service" || fail "kvdistd.service lacks $d"
done
for d in ListenStream=/run/kvdist/kvdist.sock SocketMode=0660 SocketGroup=kvdist \
        FileDescriptorName=kvdist; do
        grep -qx "$d" "$tmp/kvdistd.socket" || fail "kvdistd.socket lacks $d"
done

echo "== sysusers.d and tmpfiles.d on a scratch root"
mkdir -p "$tmp/root/etc"
systemd-sysusers --root="$tmp/root" "$sysusers" || fail "systemd-sysusers rejected $sysusers"
grep -q '^kvdist:' "$tmp/root/etc/passwd" || fail "no kvdist user after systemd-sysusers"
grep -q '^kvdist:' "$tmp/root/etc/group" || fail "no kvdist group after systemd-sysusers"
if [ "$(id -u)" -eq 0 ]; then
        systemd-tmpfiles --root="$tmp/root" --create "$tmpfiles" ||
                fail "systemd-tmpfiles rejected $tmpfiles"
        [ -d "$tmp/root/run/kvdist" ] || fail "no /run/kvdist after systemd-tmpfiles"
else
        echo "(not root: systemd-tmpfiles --create, which changes owners, is left out)"
fi
echo "check-units: ok"
