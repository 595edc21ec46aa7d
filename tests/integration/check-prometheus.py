#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# check-prometheus: a strict reader of the Prometheus text exposition format (0.0.4), for the
# metrics tests when promtool is not installed (and beside it when it is). Reads a document from
# a file or stdin and exits 1 with a message naming the line for anything a scraper would reject
# or that breaks the conventions kvdistd promises: HELP and TYPE before a family's samples, one
# block per family, valid names, labels and values, no duplicate series, counters ending in
# _total, histograms with increasing "le" buckets, cumulative counts, a +Inf bucket equal to
# _count, and a _sum. With --expect NAME it also fails when family NAME is missing.
import math
import re
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


class Bad(Exception):
    pass


def parse_value(s, where):
    if s in ("+Inf", "Inf"):
        return math.inf
    if s == "-Inf":
        return -math.inf
    if s == "NaN":
        return math.nan
    if not re.fullmatch(r"[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?)", s):
        raise Bad(f"{where}: bad value {s!r}")
    return float(s)


def parse_labels(s, where):
    """Parses 'a="x",b="y"' (the text between the braces) into a dict."""
    labels, i = {}, 0
    while i < len(s):
        m = re.match(r"([a-zA-Z_][a-zA-Z0-9_]*)=\"", s[i:])
        if not m:
            raise Bad(f"{where}: bad label at {s[i:]!r}")
        name = m.group(1)
        i += m.end()
        value = []
        while True:
            if i >= len(s):
                raise Bad(f"{where}: unterminated label value")
            c = s[i]
            if c == "\\":
                if i + 1 >= len(s) or s[i + 1] not in '\\"n':
                    raise Bad(f"{where}: bad escape in label {name}")
                value.append({"\\": "\\", '"': '"', "n": "\n"}[s[i + 1]])
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                raise Bad(f"{where}: newline in label value")
            else:
                value.append(c)
                i += 1
        if name in labels:
            raise Bad(f"{where}: label {name} twice")
        labels[name] = "".join(value)
        if i < len(s):
            if s[i] != ",":
                raise Bad(f"{where}: expected ',' after label {name}")
            i += 1
    return labels


def parse_sample(line, where):
    m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)( -?\d+)?\Z", line)
    if not m:
        raise Bad(f"{where}: not a sample: {line!r}")
    labels = parse_labels(m.group(3) or "", where)
    return m.group(1), labels, parse_value(m.group(4), where)


def family_of(sample, families):
    for suffix in ("_bucket", "_sum", "_count"):
        if sample.endswith(suffix):
            base = sample[: -len(suffix)]
            if families.get(base, {}).get("type") == "histogram":
                return base
    return sample


def check(text):
    if text and not text.endswith("\n"):
        raise Bad("the document does not end with a newline")
    families, done, series = {}, set(), set()
    current = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {n}"
        if line == "":
            raise Bad(f"{where}: empty line")
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
                continue  # a comment
            name = parts[2]
            if not NAME.match(name):
                raise Bad(f"{where}: bad metric name {name!r}")
            if name != current:
                if name in done or name in families:
                    raise Bad(f"{where}: family {name} appears in two blocks")
                if current:
                    done.add(current)
                current = name
                families[name] = {"samples": []}
            fam = families[name]
            if parts[1] in fam:
                raise Bad(f"{where}: second {parts[1]} for {name}")
            if fam["samples"]:
                raise Bad(f"{where}: {parts[1]} for {name} after its samples")
            if parts[1] == "TYPE":
                if len(parts) != 4 or parts[3] not in TYPES:
                    raise Bad(f"{where}: bad TYPE line")
                fam["TYPE"] = fam["type"] = parts[3]
            else:
                if len(parts) != 4 or not parts[3].strip():
                    raise Bad(f"{where}: empty HELP for {name}")
                fam["HELP"] = parts[3]
            continue
        name, labels, value = parse_sample(line, where)
        fam_name = family_of(name, families)
        if fam_name != current:
            raise Bad(f"{where}: sample {name} outside the block of its family")
        fam = families[fam_name]
        if "TYPE" not in fam or "HELP" not in fam:
            raise Bad(f"{where}: sample of {fam_name} before its HELP and TYPE")
        key = (name, tuple(sorted(labels.items())))
        if key in series:
            raise Bad(f"{where}: duplicate series {name}{labels}")
        series.add(key)
        if fam["type"] in ("counter", "histogram") and value < 0:
            raise Bad(f"{where}: negative {fam['type']} value")
        fam["samples"].append((name, labels, value, where))
    for name, fam in families.items():
        if fam.get("type") == "counter" and not name.endswith("_total"):
            raise Bad(f"counter {name} does not end in _total")
        if fam.get("type") == "histogram":
            check_histogram(name, fam["samples"])
    return families


def check_histogram(name, samples):
    groups = {}
    for sname, labels, value, where in samples:
        rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        g = groups.setdefault(rest, {"buckets": [], "sum": None, "count": None})
        if sname == name + "_bucket":
            if "le" not in labels:
                raise Bad(f"{where}: bucket without le")
            g["buckets"].append((parse_value(labels["le"], where), value, where))
        elif sname == name + "_sum":
            g["sum"] = value
        elif sname == name + "_count":
            g["count"] = value
        else:
            raise Bad(f"{where}: {sname} in histogram {name}")
    for rest, g in groups.items():
        b = g["buckets"]
        if not b or b[-1][0] != math.inf:
            raise Bad(f"histogram {name}{dict(rest)}: no +Inf bucket last")
        for (le1, v1, _), (le2, v2, where) in zip(b, b[1:]):
            if le2 <= le1:
                raise Bad(f"{where}: le not increasing")
            if v2 < v1:
                raise Bad(f"{where}: bucket counts not cumulative")
        if g["count"] is None or g["sum"] is None:
            raise Bad(f"histogram {name}{dict(rest)}: missing _count or _sum")
        if b[-1][1] != g["count"]:
            raise Bad(f"histogram {name}{dict(rest)}: +Inf bucket != _count")


# Documents the checker must reject, so that it cannot pass whatever it reads.
BAD_DOCUMENTS = [
    "x_total 1\n",                                                   # no HELP/TYPE
    "# HELP a A\n# TYPE a gauge\na 1\n# HELP b B\n# TYPE b gauge\nb 1\na 2\n",
    "# HELP a A\n# TYPE a counter\na 1\n",                           # counter without _total
    "# HELP a A\n# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n",      # duplicate series
    "# HELP a A\n# TYPE a gauge\na{x=\"1} 1\n",                      # unterminated label
    "# HELP a A\n# TYPE a gauge\na one\n",                           # bad value
    "# HELP h H\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
    "h_sum 1\nh_count 1\n",                                        # not cumulative
    "# HELP h H\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",  # no +Inf
    "# HELP a A\n# TYPE a gauge\na 1",                               # no final newline
]
GOOD_DOCUMENT = (
    "# HELP a_total A\n# TYPE a_total counter\na_total{s=\"q\\\"\\\\\"} 3\n"
    "# HELP h H\n# TYPE h histogram\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
    "h_sum 1.5\nh_count 2\n")


def self_test():
    for doc in BAD_DOCUMENTS:
        try:
            check(doc)
        except Bad:
            continue
        print(f"check-prometheus: self-test: accepted {doc!r}", file=sys.stderr)
        return 1
    check(GOOD_DOCUMENT)
    print(f"check-prometheus: self-test: {len(BAD_DOCUMENTS)} bad documents rejected, "
          "a good one accepted")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    expect = []
    args = argv[1:]
    while len(args) >= 2 and args[0] == "--expect":
        expect.append(args[1])
        args = args[2:]
    text = open(args[0]).read() if args and args[0] != "-" else sys.stdin.read()
    try:
        families = check(text)
        for name in expect:
            if name not in families:
                raise Bad(f"family {name} is missing")
    except Bad as e:
        print(f"check-prometheus: {e}", file=sys.stderr)
        return 1
    print(f"check-prometheus: {len(families)} families, "
          f"{sum(len(f['samples']) for f in families.values())} samples, ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
