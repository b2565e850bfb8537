#!/bin/sh
# gen-httpd-conf.sh WARM_HTTPD OUT: writes warm-httpd's default settings file (installed as
# /etc/warmd/warm-httpd.conf) from the settings `WARM_HTTPD --help` lists (config.c's
# table: name, help, default), every key commented out with its help and default, so the
# file as shipped changes nothing and names every setting there is. check-units.sh checks
# it against `warm-httpd --print-config`.
set -eu
"$1" --help | awk '
    function wrap(s,    line, n, i, w) {      # "# " lines of at most 80 columns
        n = split(s, w, " ")
        line = "#"
        for (i = 1; i <= n; i++) {
            if (length(line) + 1 + length(w[i]) > 80 && line != "#") {
                print line
                line = "#"
            }
            line = line " " w[i]
        }
        print line
    }
    BEGIN {
        print "# /etc/warmd/warm-httpd.conf: warm-httpd'"'"'s settings, `key = value`; '"'"'#'"'"' starts a"
        print "# comment. Every key is listed with its default, commented out; an unknown key is"
        print "# an error. Uncomment a line to change that setting, then"
        print "# `systemctl restart warm-httpd.service`. warm-httpd --KEY=VALUE on the command"
        print "# line overrides this file. Generated from warm-httpd --help."
    }
    /^Settings/ { settings = 1; next }
    settings && /^  --[a-z_0-9]+ / {
        key = $1; sub(/^--/, "", key)
        help = $0; sub(/^  --[a-z_0-9]+ +/, "", help)
        next
    }
    settings && key != "" && /^ +\(default: .*\)$/ {
        def = $0; sub(/^ +\(default: /, "", def); sub(/\)$/, "", def)
        if (def == "empty") def = ""
        print ""
        wrap(help)
        print "#" key " =" (def == "" ? "" : " " def)
        key = ""
    }
' >"$2.tmp"
mv "$2.tmp" "$2"
