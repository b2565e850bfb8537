#!/bin/sh
# gen-man.sh WARMD TEMPLATE OUT: writes warmd(8) from TEMPLATE, with the line `.\" settings: filled in by gen-man.sh`
# replaced by every key of `WARMD --print-default-config` (name, default, help), so the
# manual lists exactly the daemon's schema.
set -eu
"$1" --print-default-config | awk '
    function esc(s) { gsub(/\\/, "\\e", s); gsub(/-/, "\\-", s); return s }
    function sentence(s) { s = toupper(substr(s, 1, 1)) substr(s, 2); return s ~ /[.]$/ ? s : s "." }
    /^$/ { help = ""; extra = ""; next }          # the file header ends at a blank line
    /^#[a-z_0-9]+ =/ {
        line = substr($0, 2)
        key = line; sub(/ =.*/, "", key)
        def = line; sub(/^[^=]*= ?/, "", def)
        printf ".TP\n.B %s\n", key
        printf "%s%s Default: %s.\n", esc(sentence(help)), esc(extra),
               def == "" ? "empty" : "\\fB" esc(def) "\\fR"
        help = ""; extra = ""
        next
    }
    /^# (range|one of): / { extra = extra " " sentence(substr($0, 3)); next }
    /^# / { help = help (help == "" ? "" : " ") substr($0, 3) }
' >"$3.settings"
awk -v f="$3.settings" '
    $0 == ".\\\" settings: filled in by gen-man.sh" { while ((getline l < f) > 0) print l; next }
    { print }
' "$2" >"$3.tmp"
rm -f "$3.settings"
mv "$3.tmp" "$3"
