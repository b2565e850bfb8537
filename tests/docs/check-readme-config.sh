#!/bin/sh
# README.md's configuration reference must equal what the daemon's schema renders:
# scripts/gen-config-doc.py over `warmd --print-default-config`. On a mismatch it prints
# the diff; regenerate with:  tests/docs/check-readme-config.sh --update
set -e
top=$(cd "$(dirname "$0")/../.." && pwd)
warmd=${WARM_BIN:-$top/build/bin}/warmd
gen=$(mktemp) && trap 'rm -f "$gen" "$gen.readme"' EXIT
"$warmd" --print-default-config | python3 "$top/scripts/gen-config-doc.py" > "$gen"
awk '/<!-- config:end -->/{p=0} p{print} /<!-- config:begin -->/{p=1}' "$top/README.md" > "$gen.readme"
if [ "$1" = "--update" ]; then
    python3 - "$top/README.md" "$gen" <<'PY'
import sys
readme, gen = sys.argv[1], open(sys.argv[2]).read()
s = open(readme).read()
a = s.index("<!-- config:begin -->\n") + len("<!-- config:begin -->\n")
b = s.index("<!-- config:end -->")
open(readme, "w").write(s[:a] + gen + s[b:])
PY
    exit 0
fi
if ! diff -u "$gen.readme" "$gen"; then
    echo "README.md's configuration reference is out of date (run $0 --update)"
    exit 1
fi
n=$(grep -c '^| `' "$gen")
echo "README configuration reference: $n keys, equal to the schema"
echo "1 passed, 0 failed"
