# SPDX-License-Identifier: MIT
"""The breaks a check still tolerates, listed in a file, so that the check fails on every new one.

A known-breaks file holds one key a line (what a check prints before ": "; '#' starts a comment).
A break whose key is listed passes; a break not listed fails; a listed key that no longer breaks
fails too, so that the list only shrinks.
"""


def load(path):
    keys = set()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.split("#", 1)[0].strip()
            if line:
                keys.add(line)
    return keys


def judge(breaks, path, tool):
    """breaks: (key, message) pairs. Prints what fails; returns the number of failures."""
    known = load(path)
    found = {key for key, _ in breaks}
    failures = 0
    for key, message in breaks:
        if key not in known:
            print(message)
            failures += 1
    for key in sorted(known - found):
        print(f"{key}: listed in {path} but no longer a break: remove it from there")
        failures += 1
    print(f"{tool}: {len(breaks) - sum(1 for k, _ in breaks if k not in known)} known breaks "
          f"left (listed in {path}), {failures} failing")
    return failures
