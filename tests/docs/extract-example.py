#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""extract-example: writes the fenced code block of a Markdown file whose first line starts
with MARKER to OUTPUT, so that the build compiles and the tests run the README's examples as
they are printed. Fails when no block, or more than one, starts with MARKER.
Usage: extract-example.py FILE.md MARKER OUTPUT
"""
import re
import sys


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().split("\n")[-1], file=sys.stderr)
        return 2
    path, marker, output = argv[1:]
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    blocks = [body for body in re.findall(r"^```[\w+-]*\n(.*?)^```[ \t]*$", text, re.M | re.S)
              if body.startswith(marker)]
    if len(blocks) != 1:
        print(f"extract-example: {path} has {len(blocks)} code blocks starting with "
              f"{marker!r}, not one", file=sys.stderr)
        return 1
    with open(output, "w", encoding="utf-8") as fh:
        fh.write(blocks[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
