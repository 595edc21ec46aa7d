#!/bin/sh
# SPDX-License-Identifier: MIT
# test-install: `meson install --destdir` into a scratch directory has everything the operations
# issue lists, in the usual places, and an out-of-tree program builds against it with
# `pkg-config kvdist` and talks to the installed kvdistd.
#   test-install.sh BUILD_DIR PREFIX BINDIR SBINDIR LIBDIR INCLUDEDIR SYSCONFDIR MANDIR CC SANITIZE
#                   [PYTHON_PACKAGE_DIR]
# The directories are meson's options (relative to PREFIX or absolute); SANITIZE is b_sanitize,
# whose flags the test program needs when the library was built with them. PYTHON_PACKAGE_DIR,
# where the kvdist Python package goes (absolute; empty when it is not built), is checked too:
# /usr/bin/python3 imports the installed package and talks to the installed kvdistd.
set -eu

build=$1 prefix=$2 bindir=$3 sbindir=$4 libdir=$5 includedir=$6 sysconfdir=$7 mandir=$8
cc=$9 sanitize=${10} pydir=${11:-}

tmp=$(mktemp -d)
daemon_pid=
cleanup() {
        [ -z "$daemon_pid" ] || kill "$daemon_pid" 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
        echo "test-install: FAIL: $*" >&2
        exit 1
}
# A meson directory option as an absolute path under the destdir.
under() {
        case $1 in
        /*) echo "$tmp/dest$1" ;;
        *) echo "$tmp/dest$prefix/$1" ;;
        esac
}

meson install -C "$build" --destdir "$tmp/dest" --no-rebuild --quiet ||
        fail "meson install --destdir failed"

lib=$(under "$libdir")
etc=$(under "$sysconfdir")
man=$(under "$mandir")
for f in "$(under "$sbindir")/kvdistd" "$(under "$bindir")/kvdistctl"; do
        [ -x "$f" ] || fail "no executable $f"
done
for f in "$lib/libkvdist.so.1.0.0" "$(under "$includedir")/kvdist/kvdist.h" \
        "$(under "$includedir")/kvdist/kvdist-version.h" \
        "$lib/pkgconfig/kvdist.pc" "$etc/kvdist/kvdistd.json" \
        "$tmp/dest$prefix/lib/systemd/system/kvdistd.service" \
        "$tmp/dest$prefix/lib/systemd/system/kvdistd.socket" \
        "$tmp/dest$prefix/lib/sysusers.d/kvdist.conf" \
        "$tmp/dest$prefix/lib/tmpfiles.d/kvdist.conf" \
        "$man/man8/kvdistd.8" "$man/man1/kvdistctl.1" "$man/man3/kvdist.h.3"; do
        [ -f "$f" ] || fail "not installed: ${f#"$tmp/dest"}"
done
[ "$(readlink "$lib/libkvdist.so.1")" = libkvdist.so.1.0.0 ] || fail "libkvdist.so.1 link"
if [ -n "$pydir" ]; then
        for f in __init__.py _datadist.py _memory.py _status.py _types.py; do
                [ -f "$tmp/dest$pydir/$f" ] || fail "not installed: $pydir/$f"
        done
        set -- "$tmp/dest$pydir"/_kvdist.*.so
        [ -f "$1" ] || fail "not installed: $pydir/_kvdist.*.so"
        # The installed extension finds libkvdist where it was installed, not in the build tree.
        runpath=$(objdump -p "$1" | awk '$1 == "RUNPATH" || $1 == "RPATH" { print $2 }')
        case $runpath in
        *"$build"*) fail "the installed _kvdist points into the build tree: $runpath" ;;
        esac
fi
[ "$(readlink "$lib/libkvdist.so")" = libkvdist.so.1 ] || fail "libkvdist.so link"
echo "test-install: every file is in place"

# The unit runs the installed daemon on the installed config.
grep -qx "ExecStart=$(echo "$(under "$sbindir")" | sed "s|^$tmp/dest||")/kvdistd --config $(echo "$etc" | sed "s|^$tmp/dest||")/kvdist/kvdistd.json" \
        "$tmp/dest$prefix/lib/systemd/system/kvdistd.service" ||
        fail "ExecStart of the installed kvdistd.service does not name the installed daemon and config"
if grep -l '@[A-Za-z_]*@' "$man"/man*/* "$tmp/dest$prefix/lib/systemd/system/kvdistd.service"; then
        fail "unsubstituted @VARIABLES@ in the files above"
fi
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$etc/kvdist/kvdistd.json" ||
        fail "the installed config is not JSON"

# The library exports kvd_* and nothing else, under its soname.
soname=$(objdump -p "$lib/libkvdist.so.1.0.0" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = libkvdist.so.1 ] || fail "SONAME is '$soname', want libkvdist.so.1"
nm -D --defined-only "$lib/libkvdist.so.1.0.0" | awk '{ print $3 }' | grep -v '^KVDIST_' \
        >"$tmp/versioned"
# Every symbol carries the version node KVDIST_1.0 (a changed ABI gets a new node, not a new
# meaning under the old one).
if grep -v '@@KVDIST_1\.0$' "$tmp/versioned"; then
        fail "the symbols above are not versioned KVDIST_1.0"
fi
sed 's/@.*//' "$tmp/versioned" >"$tmp/exports"
[ -s "$tmp/exports" ] || fail "libkvdist exports nothing"
if grep -v '^kvd_' "$tmp/exports"; then
        fail "libkvdist exports the symbols above, which are not kvd_*"
fi
grep -qx kvd_daemon_metrics "$tmp/exports" || fail "kvd_daemon_metrics is not exported"
grep -qx kvd_version "$tmp/exports" || fail "kvd_version is not exported"
echo "test-install: libkvdist exports $(wc -l <"$tmp/exports") kvd_* symbols as libkvdist.so.1, versioned KVDIST_1.0"

# An out-of-tree program, built with pkg-config against the installed tree only.
cat >"$tmp/prog.c" <<'PROG'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kvdist/kvdist.h>

int main(int argc, char **argv)
{
        kvd_option opt = { "socket_path", argv[1] };
        kvd_client *client = NULL;
        char *json = NULL;
        int r;

        r = kvd_client_connect(&opt, 1, &client);
        if (r < 0) {
                fprintf(stderr, "connect: %s: %s\n", kvd_strerror(r), kvd_last_error(NULL));
                return 1;
        }
        r = kvd_daemon_status(client, &json);
        if (r < 0) {
                fprintf(stderr, "status: %s\n", kvd_strerror(r));
                return 1;
        }
        printf("%s\n", strstr(json, "\"version\"") ? "status ok" : "status without a version");
        /* The header's version is the library's, and the daemon's. */
        if (strcmp(kvd_version(), KVDIST_VERSION) != 0 || !strstr(json, KVDIST_VERSION) ||
            KVDIST_VERSION_NUMBER < 10000) {
                fprintf(stderr, "version: library %s, header %s (%d)\n", kvd_version(),
                        KVDIST_VERSION, KVDIST_VERSION_NUMBER);
                return 1;
        }
        free(json);
        return kvd_client_finalize(client) < 0;
}
PROG
export PKG_CONFIG_SYSROOT_DIR="$tmp/dest" PKG_CONFIG_LIBDIR="$lib/pkgconfig"
flags=$(pkg-config --cflags --libs kvdist) || fail "pkg-config kvdist failed"
case $flags in
*"$tmp/dest"*) ;;
*) fail "pkg-config kvdist does not point into the installed tree: $flags" ;;
esac
san=
[ "$sanitize" = none ] || san="-fsanitize=$sanitize"
# shellcheck disable=SC2086 # the flags are words
"$cc" -Wall -Werror $san -o "$tmp/prog" "$tmp/prog.c" $flags || fail "the program does not build"
echo "test-install: built with: $flags"

"$(under "$sbindir")/kvdistd" --socket "$tmp/kvdist.sock" --memory-size 0 \
        >"$tmp/kvdistd.log" 2>&1 &
daemon_pid=$!
# Up when the socket is there; the ceiling (60 s, times $KVDIST_TEST_TIMEOUT_MULTIPLIER) is only
# for a daemon that hangs.
mult=${KVDIST_TEST_TIMEOUT_MULTIPLIER:-1}
case $mult in '' | *[!0-9]*) mult=1 ;; esac
limit=$((60 * mult))
start=$(date +%s)
until [ -S "$tmp/kvdist.sock" ]; do
        [ $(($(date +%s) - start)) -le "$limit" ] && kill -0 "$daemon_pid" 2>/dev/null ||
                { cat "$tmp/kvdistd.log" >&2; fail "the installed kvdistd did not come up"; }
        sleep 0.05
done
out=$(LD_LIBRARY_PATH="$lib" "$tmp/prog" "$tmp/kvdist.sock") || fail "the program failed: $out"
[ "$out" = "status ok" ] || fail "the program printed: $out"
if [ -n "$pydir" ]; then
        preload=
        case $sanitize in
        # As tests/python/meson.build says: the ASan runtime first, no leak report of CPython's.
        *address*) preload=$("$cc" -print-file-name=libasan.so) ;;
        esac
        out=$(cd "$tmp" && LD_PRELOAD="$preload" ASAN_OPTIONS=detect_leaks=0 \
                PYTHONPATH="$(dirname "$tmp/dest$pydir")" LD_LIBRARY_PATH="$lib" /usr/bin/python3 -c '
import sys, kvdist
print(kvdist.__file__.startswith(sys.argv[2]) and "version" in kvdist.daemon_status(sys.argv[1]))
' "$tmp/kvdist.sock" "$tmp/dest") || fail "the installed Python package failed: $out"
        [ "$out" = True ] || fail "the installed Python package printed: $out"
        echo "test-install: /usr/bin/python3 imports the installed kvdist package"
fi
kill "$daemon_pid"
wait "$daemon_pid" || fail "the installed kvdistd exited with status $?"
daemon_pid=
echo "test-install: ok"
