#!/bin/sh
# packaging-units (CTest): checks the packaging files of a build tree without installing
# anything (tests/packaging/check-package.sh checks the installed Debian package).
#   1. packaging/warmd.conf is `warmd --print-default-config`: every schema key once, each
#      commented out, and uncommented it reads back as exactly the defaults; warmd.8
#      documents the same keys.
#   2. systemd-analyze verify is clean (no output, exit 0) for warmd.service,
#      warmd-gpu.service and warmd.socket.
#   3. systemd-analyze security --offline=yes --threshold=10 passes for the CPU unit, the
#      full GPU unit, and the CPU unit + the gpu.conf drop-in (what admins install). The
#      threshold is an integer on a 0-100 scale: 10 means exposure 1.0.
#   4. sysusers.d and tmpfiles.d files apply cleanly in a scratch root (users warm and
#      warm-httpd, the latter in group warm).
#   5. warm-httpd.service and warm-httpd.socket: verify clean, security under the same
#      threshold; the warmd.conf.d drop-in trusts user warm-httpd and sets nothing else;
#      warm-httpd.1 documents the settings of warm-httpd --help; warm-httpd.conf (the
#      default settings file) lists each of them once, commented out with its default.
# Usage: check-units.sh BUILD_DIR. Exit 77 (skip) without systemd-analyze.
set -eu
B=$(cd "${1:?usage: check-units.sh BUILD_DIR}" && pwd)
P=$B/packaging
W=$B/bin/warmd
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze not installed"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- 1. the default config ------------------------------------------------------------
"$W" --print-default-config | cmp -s - "$P/warmd.conf" ||
    fail "$P/warmd.conf differs from warmd --print-default-config (rebuild warm_packaging)"
"$W" --config /dev/null --print-config >"$T/defaults"
sed 's/ =.*//' "$T/defaults" >"$T/keys"
sed -n 's/^#\([a-z_0-9]*\) =.*/\1/p' "$P/warmd.conf" >"$T/conf-keys"
cmp -s "$T/keys" "$T/conf-keys" || { diff "$T/keys" "$T/conf-keys"; fail "warmd.conf keys differ from the schema"; }
if grep -v '^#' "$P/warmd.conf" | grep -q .; then
    fail "warmd.conf sets something: $(grep -v '^#' "$P/warmd.conf" | grep . | head -1)"
fi
sed 's/^#\([a-z_0-9]* =\)/\1/' "$P/warmd.conf" >"$T/uncommented.conf"
"$W" --config "$T/uncommented.conf" --print-config >"$T/uncommented" ||
    fail "warmd.conf with every key uncommented does not load"
cmp -s "$T/defaults" "$T/uncommented" ||
    { diff "$T/defaults" "$T/uncommented"; fail "uncommented warmd.conf is not the defaults"; }
echo "ok: warmd.conf lists $(wc -l <"$T/keys") keys, all commented out, defaults round-trip"
# warmd(8) documents the same keys, in the same order.
awk '/^\.SH/ { in_settings = ($2 == "SETTINGS") }
     in_settings && prev == ".TP" && /^\.B / { print $2 } { prev = $0 }' "$P/warmd.8" >"$T/man-keys"
cmp -s "$T/keys" "$T/man-keys" || { diff "$T/keys" "$T/man-keys"; fail "warmd.8 keys differ from the schema"; }
echo "ok: warmd.8 documents the same $(wc -l <"$T/keys") keys"

# ---- 2. verify --------------------------------------------------------------------------
# The one change: ExecStart= points at the build tree's warmd (verify checks it exists).
mkdir -p "$T/units"
for u in warmd.service warmd-gpu.service warmd.socket; do
    sed "s|^ExecStart=[^ ]*/warmd|ExecStart=$W|" "$P/$u" >"$T/units/$u"
done
for u in warmd.service warmd-gpu.service; do
    out=$(systemd-analyze verify --man=no "$T/units/$u" "$T/units/warmd.socket" 2>&1) ||
        fail "systemd-analyze verify $u: $out"
    [ -z "$out" ] || fail "systemd-analyze verify $u is not clean: $out"
    echo "ok: systemd-analyze verify $u warmd.socket: clean"
done

# ---- 3. security ------------------------------------------------------------------------
score() { # UNIT-ARGS...: prints the exposure, fails over the threshold
    out=$(systemd-analyze security --offline=yes --threshold=10 "$@" 2>&1) ||
        { echo "$out"; fail "systemd-analyze security $* is over 1.0"; }
    echo "$out" | sed -n 's/^→ Overall exposure level for \(.*\)$/\1/p'
}
echo "ok: exposure $(score "$T/units/warmd.service") (CPU)"
echo "ok: exposure $(score "$T/units/warmd-gpu.service") (GPU, full unit)"
R=$T/root
mkdir -p "$R/lib/systemd/system" "$R/etc/systemd/system/warmd.service.d"
cp "$T/units/warmd.service" "$T/units/warmd.socket" "$R/lib/systemd/system/"
cp "$P/gpu.conf" "$R/etc/systemd/system/warmd.service.d/gpu.conf"
echo "ok: exposure $(score --root="$R" warmd.service) (GPU, warmd.service + gpu.conf drop-in)"
# The drop-in and the full GPU unit must mean the same thing.
for k in PrivateDevices DevicePolicy DeviceAllow; do
    a=$(grep "^$k=" "$P/warmd-gpu.service")
    b=$(grep "^$k=" "$P/gpu.conf")
    [ "$a" = "$b" ] || fail "$k differs between warmd-gpu.service and gpu.conf"
done

# ---- 4. sysusers.d, tmpfiles.d ----------------------------------------------------------
S=$(cd "$(dirname "$0")/../../packaging" && pwd)
mkdir -p "$T/sys/etc"
systemd-sysusers --root="$T/sys" "$S/sysusers.conf" >/dev/null 2>&1 ||
    fail "systemd-sysusers rejects sysusers.conf"
grep -q '^warm:x:[0-9]*:[0-9]*:.*:/var/lib/warmd:/usr/sbin/nologin$' "$T/sys/etc/passwd" ||
    fail "sysusers.conf does not create user warm"
grep -q '^warm:x:[0-9]*:$' "$T/sys/etc/group" || fail "sysusers.conf does not create group warm"
# warm-httpd's user: primary group warm (it opens /run/warmd.sock), no home, no shell.
warm_gid=$(sed -n 's/^warm:x:\([0-9]*\):$/\1/p' "$T/sys/etc/group")
grep -q "^warm-httpd:x:[0-9]*:$warm_gid:.*:/:/usr/sbin/nologin\$" "$T/sys/etc/passwd" ||
    fail "sysusers.conf does not create user warm-httpd in group warm"
systemd-tmpfiles --create --root="$T/sys" "$S/tmpfiles.conf" ||
    fail "systemd-tmpfiles rejects tmpfiles.conf"
[ "$(stat -c %a "$T/sys/var/lib/warmd")" = 700 ] || fail "/var/lib/warmd is not 0700"
[ "$(stat -c %u:%a "$T/sys/var/lib/warmd/models")" = 0:755 ] ||
    fail "/var/lib/warmd/models is not root-owned 0755"
echo "ok: sysusers.d creates warm:warm and warm-httpd:warm, tmpfiles.d creates /var/lib/warmd{,/models}"

# ---- 5. warm-httpd's units and warmd drop-in --------------------------------------------
H=$B/bin/warm-httpd
if [ -x "$H" ] && [ -f "$P/warm-httpd.service" ]; then
    sed "s|^ExecStart=[^ ]*/warm-httpd|ExecStart=$H|" "$P/warm-httpd.service" >"$T/units/warm-httpd.service"
    cp "$P/warm-httpd.socket" "$T/units/warm-httpd.socket"
    out=$(systemd-analyze verify --man=no "$T/units/warm-httpd.service" \
              "$T/units/warm-httpd.socket" 2>&1) || fail "systemd-analyze verify warm-httpd.service: $out"
    [ -z "$out" ] || fail "systemd-analyze verify warm-httpd.service is not clean: $out"
    echo "ok: systemd-analyze verify warm-httpd.service warm-httpd.socket: clean"
    echo "ok: exposure $(score "$T/units/warm-httpd.service") (warm-httpd)"
    # The drop-in the package installs in warmd.conf.d trusts warm-httpd's user, and
    # nothing else (its user does not exist here: the key is checked by name).
    D=$S/warmd.conf.d/10-warm-httpd.conf
    [ "$(grep -v '^#' "$D" | grep .)" = "trusted_proxy_uids = warm-httpd" ] ||
        fail "$D sets more or less than trusted_proxy_uids = warm-httpd"
    echo "ok: warmd.conf.d/10-warm-httpd.conf sets trusted_proxy_uids = warm-httpd only"
    # warm-httpd(1) documents the settings of warm-httpd --help, in the same order.
    "$H" --help | sed -n 's/^  --\([a-z_0-9]*\) .*/\1/p' | grep -v '^config$' >"$T/httpd-keys"
    awk '/^\.SH/ { in_settings = ($2 == "SETTINGS") }
         in_settings && prev == ".TP" && /^\.B / { print $2 } { prev = $0 }' \
        "$S/warm-httpd.1" >"$T/httpd-man-keys"
    [ -s "$T/httpd-keys" ] && cmp -s "$T/httpd-keys" "$T/httpd-man-keys" ||
        { diff "$T/httpd-keys" "$T/httpd-man-keys"; fail "warm-httpd.1 settings differ from warm-httpd --help"; }
    echo "ok: warm-httpd.1 documents the $(wc -l <"$T/httpd-keys") settings of warm-httpd --help"
    # The default settings file (installed as /etc/warmd/warm-httpd.conf) is gen-httpd-conf.sh's
    # output for this warm-httpd: every key of --print-config once, in order, commented
    # out; as shipped it sets nothing, and uncommented it reads back as exactly the defaults.
    C=$P/warm-httpd.conf
    [ -f "$C" ] || fail "$C missing (build warm_httpd_conf)"
    sh "$S/gen-httpd-conf.sh" "$H" "$T/warm-httpd.conf"
    cmp -s "$T/warm-httpd.conf" "$C" ||
        fail "$C differs from gen-httpd-conf.sh's output (rebuild warm_httpd_conf)"
    "$H" --config=/dev/null --print-config >"$T/httpd-defaults"
    sed -n 's/^\([a-z_0-9]*\) = .*/\1/p' "$T/httpd-defaults" >"$T/httpd-print-keys"
    sed -n 's/^#\([a-z_0-9]*\) =.*/\1/p' "$C" >"$T/httpd-conf-keys"
    [ -s "$T/httpd-print-keys" ] && cmp -s "$T/httpd-print-keys" "$T/httpd-conf-keys" ||
        { diff "$T/httpd-print-keys" "$T/httpd-conf-keys"; fail "$C does not list the keys of warm-httpd --print-config"; }
    if grep -v '^#' "$C" | grep -n .; then fail "$C sets something"; fi
    "$H" --config="$C" --print-config | cmp -s - "$T/httpd-defaults" ||
        fail "warm-httpd --config=$C does not read back as the defaults"
    sed 's/^#\([a-z_0-9]* =\)/\1/' "$C" >"$T/httpd-all.conf"
    "$H" --config="$T/httpd-all.conf" --print-config >"$T/httpd-all" ||
        fail "$C uncommented does not load"
    cmp -s "$T/httpd-all" "$T/httpd-defaults" ||
        { diff "$T/httpd-defaults" "$T/httpd-all"; fail "$C uncommented is not the defaults"; }
    echo "ok: warm-httpd.conf lists the $(wc -l <"$T/httpd-conf-keys") settings commented out; uncommented they are the defaults"
else
    echo "(warm-httpd not built: its units are not checked)"
fi
