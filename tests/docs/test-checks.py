#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""test-checks: scripts/check-docs and scripts/check-man find what they are for.

Each case writes a small Markdown tree with one defect and asserts that check-docs fails on it,
naming the defect, and that the same tree without the defect passes; mangled-README.txt, the
first 110 lines of the README as clang-format left it in merge 7a00a0f, must fail too. check-man
is run with a kvdistd and a kvdistctl whose --help knows one flag more than the man pages.
Prints "N passed, N failed" and exits 1 when a case failed.
Usage: test-checks.py (from anywhere; finds the scripts next to itself)
"""
import os
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
CHECK_DOCS = os.path.join(ROOT, "scripts", "check-docs")
CHECK_MAN = os.path.join(ROOT, "scripts", "check-man")

GOOD_README = """# Project

Intro with a [guide](docs/guide.md#second-part) and an [anchor](#usage).

## Usage

| a | b |
|---|---|
| `x\\|y` | 2 |

- a list item
    continued, indented

```c
#include <stdio.h>
        indented code is fine
```
"""
GOOD_GUIDE = """# Guide

What this covers. Back to the [README](../README.md).

## Second part

Text.
"""

# (name, file to change, old text, new text, what the report must say)
DEFECTS = [
    ("heading without blank", "README.md", "# Project", "#Project", "not a heading"),
    ("no title", "docs/guide.md", "# Guide\n", "Guide\n", "starts with its '# ' title"),
    ("skipped level", "docs/guide.md", "## Second part", "### Second part", "a level is skipped"),
    ("unclosed fence", "README.md", "        indented code is fine\n```\n",
     "        indented code is fine\n", "never closed"),
    ("indented prose", "README.md", "Intro with", "        Intro with", "indented prose"),
    ("table row", "README.md", "| `x\\|y` | 2 |", "| x | y | 2 |", "table row has 3 cells"),
    ("missing file", "README.md", "docs/guide.md#second-part", "docs/gide.md", "does not exist"),
    ("missing anchor", "README.md", "#second-part", "#third-part", "no heading with anchor"),
    ("missing local anchor", "README.md", "(#usage)", "(#use)", "no heading with anchor #use"),
    ("no back link", "docs/guide.md", "Back to the [README](../README.md).", "", "links back"),
    ("long README", "README.md", "Text that is not there", "", "at most 250"),
]


def write_tree(root, change=None):
    files = {"README.md": GOOD_README, "docs/guide.md": GOOD_GUIDE}
    if change:
        name, path, old, new, _ = change
        if name == "long README":
            files[path] += "\nline\n" * 130
        else:
            assert old in files[path], name
            files[path] = files[path].replace(old, new, 1)
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)) or root, exist_ok=True)
        with open(os.path.join(root, path), "w") as fh:
            fh.write(text)
    return [os.path.join(root, p) for p in files]


def check_docs(paths):
    root = os.path.dirname(paths[0])
    r = subprocess.run([sys.executable, CHECK_DOCS, "--root", root, *paths], capture_output=True,
                       text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    passed = failed = 0

    def verdict(ok, what, detail=""):
        nonlocal passed, failed
        print(f"{'ok' if ok else 'FAIL'}: {what}")
        if not ok:
            print("    " + detail.replace("\n", "\n    "))
        passed, failed = passed + ok, failed + (not ok)

    with tempfile.TemporaryDirectory() as tmp:
        rc, out = check_docs(write_tree(tmp))
        verdict(rc == 0, "check-docs passes a clean tree", out)
    for change in DEFECTS:
        with tempfile.TemporaryDirectory() as tmp:
            rc, out = check_docs(write_tree(tmp, change))
            verdict(rc == 1 and change[4] in out, f"check-docs fails on: {change[0]}", out)

    with tempfile.TemporaryDirectory() as tmp:
        mangled = os.path.join(tmp, "README.md")
        with open(os.path.join(HERE, "mangled-README.txt")) as src, open(mangled, "w") as dst:
            dst.write(src.read())
        rc, out = check_docs([mangled])
        verdict(rc == 1 and "not a heading: '#kvdist'" in out and "indented prose" in out,
                "check-docs fails on the README clang-format mangled", out)

    # check-format refuses anything but C and header files.
    r = subprocess.run([os.path.join(ROOT, "scripts", "check-format"), "--fix", "README.md"],
                       capture_output=True, text=True)
    verdict(r.returncode in (2, 77) and ("refusing" in r.stderr or "SKIP" in r.stdout),
            "check-format --fix refuses README.md", r.stdout + r.stderr)

    with tempfile.TemporaryDirectory() as tmp:
        progs = []
        for name, flag in (("kvdistd", "--bogus-flag"), ("kvdistctl", "--another-flag")):
            real = os.environ.get(name.upper())
            if not real:
                print(f"SKIP: check-man cases need ${name.upper()} (the built {name})")
                return 77
            fake = os.path.join(tmp, name)
            with open(fake, "w") as fh:
                fh.write(f"#!/bin/sh\n'{real}' --help\necho '      {flag} N   new'\n")
            os.chmod(fake, stat.S_IRWXU)
            progs.append((real, fake, flag))
        r = subprocess.run([sys.executable, CHECK_MAN, progs[0][0], progs[1][0]],
                           capture_output=True, text=True)
        verdict(r.returncode == 0, "check-man passes the built programs", r.stdout + r.stderr)
        r = subprocess.run([sys.executable, CHECK_MAN, progs[0][1], progs[1][1]],
                           capture_output=True, text=True)
        verdict(r.returncode == 1 and "--bogus-flag" in r.stdout and "--another-flag" in r.stdout,
                "check-man fails on a flag the man pages lack", r.stdout + r.stderr)

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
