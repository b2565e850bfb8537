#!/usr/bin/python3
"""Turns `warmd --print-default-config` (the schema, rendered by the daemon) into the
Markdown table of README.md's configuration reference. Reads stdin, writes stdout."""
import sys

rows, comment = [], []
for line in sys.stdin.read().splitlines()[4:]:
    if line.startswith("#") and "=" in line and not line.startswith("# "):
        key, _, default = line[1:].partition("=")
        text, extra = [], []
        for c in comment:
            (extra if c.startswith(("range:", "one of:")) else text).append(c)
        desc = " ".join(text) + "".join(f" ({e})" for e in extra)
        rows.append((key.strip(), default.strip() or '""', desc.replace("|", "\\|")))
        comment = []
    elif line.startswith("# "):
        comment.append(line[2:].strip())
    elif not line.strip():
        comment = []

print("| key (`--key-name=VALUE` on the command line) | default | meaning |")
print("| --- | --- | --- |")
for key, default, desc in rows:
    print(f"| `{key}` | `{default}` | {desc} |")
