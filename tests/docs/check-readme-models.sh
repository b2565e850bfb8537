#!/bin/sh
# The model tables of README.md and packaging/README.installed.md (between
# <!-- models:begin --> and <!-- models:end -->) must equal what the engine loads, as
# `warm-gguf --supported` prints it from the engine's own tables (the arch table and the
# type traits): an architecture or weight type added to the engine shows up here as a
# failure until the READMEs list it. On a mismatch it prints the diff; regenerate with:
#   tests/docs/check-readme-models.sh --update
set -e
top=$(cd "$(dirname "$0")/../.." && pwd)
gguf=${WARM_BIN:-$top/build/bin}/warm-gguf
gen=$(mktemp) && trap 'rm -f "$gen" "$gen.doc" "$gen.sup"' EXIT
"$gguf" --supported >"$gen.sup"
python3 - "$gen.sup" >"$gen" <<'PY'
import sys
archs, types, part = [], [], None
for line in open(sys.argv[1]).read().splitlines():
    if line.startswith("architectures"):
        part = archs
    elif line.startswith("weight types"):
        part = types
    elif line.startswith("  ") and part is not None:
        part.append(line.split())
if not archs or not types:
    sys.exit("warm-gguf --supported listed no architectures or no weight types")
names = ", ".join(t[0] for t in types)
print("| architecture | weight types |")
print("| --- | --- |")
for a in archs:
    print(f"| `{a[0]}` | {names} |")
print()
print("| weight type | " + " | ".join(t[0] for t in types) + " |")
print("| --- |" + " ---: |" * len(types))
print("| bits per weight | " + " | ".join(t[1] for t in types) + " |")
PY
status=0
for doc in README.md packaging/README.installed.md; do
    if [ "$1" = "--update" ]; then
        python3 - "$top/$doc" "$gen" <<'PY'
import sys
doc, gen = sys.argv[1], open(sys.argv[2]).read()
s = open(doc).read()
a = s.index("<!-- models:begin -->\n") + len("<!-- models:begin -->\n")
b = s.index("<!-- models:end -->")
open(doc, "w").write(s[:a] + gen + s[b:])
PY
        continue
    fi
    awk '/<!-- models:end -->/{p=0} p{print} /<!-- models:begin -->/{p=1}' "$top/$doc" >"$gen.doc"
    if ! grep -q '<!-- models:begin -->' "$top/$doc"; then
        echo "$doc: no <!-- models:begin --> ... <!-- models:end --> block"
        status=1
    elif ! diff -u "$gen.doc" "$gen"; then
        echo "$doc: the model table differs from warm-gguf --supported (run $0 --update)"
        status=1
    else
        echo "$doc: model table equal to warm-gguf --supported"
    fi
done
[ "$1" = "--update" ] && exit 0
[ $status = 0 ] || { echo "0 passed, 1 failed"; exit 1; }
echo "$(grep -c '^| `' "$gen") architectures, $(sed -n '/^weight types/,$p' "$gen.sup" | grep -c '^  ') weight types"
echo "1 passed, 0 failed"
