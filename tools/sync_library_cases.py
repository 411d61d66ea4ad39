#!/usr/bin/env python3
"""Copies the shipped library policies and bindings into the conformance
cases that use them.

The conformance format (../shared/conformance/FORMAT.md) holds policies
inline, so a case under conformance/library/ names the file it tests with a
marker line right above the list item:

    policies:
    # file: policies/security-seccomp-runtime-default.yaml
    - apiVersion: ...        <- rewritten from the file by this script

This script rewrites every such item from the file (comment lines dropped).
tests/library.rs fails when an item and its file differ, so a policy edited
without running this script cannot go unnoticed.

Usage: python3 tools/sync_library_cases.py [--check]
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^# file: ((?:policies|bindings)/[\w.-]+\.yaml)$")


def as_list_item(path):
    lines = [
        l for l in (ROOT / path).read_text().splitlines()
        if l.strip() and not l.lstrip().startswith("#") and l != "---"
    ]
    return ["- " + lines[0]] + ["  " + l for l in lines[1:]]


def sync(text):
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        m = MARKER.match(line)
        if not m:
            continue
        out.extend(as_list_item(m.group(1)))
        # Skip the old copy: one "- " item and its indented lines.
        if i < len(lines) and lines[i].startswith("- "):
            i += 1
            while i < len(lines) and (lines[i].startswith("  ") or lines[i] == ""):
                i += 1
    return "\n".join(out) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for case in sorted((ROOT / "conformance" / "library").glob("*.yaml")):
        text = case.read_text()
        new = sync(text)
        if new != text:
            stale.append(case.relative_to(ROOT))
            if not check:
                case.write_text(new)
    for s in stale:
        print(("stale: " if check else "synced: ") + str(s))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
