#!/bin/sh
# packaging-install-prefix (CTest): `cmake --install BUILD --prefix P` of a build configured
# for another prefix writes files that point at P, not at the configured prefix:
#   1. warmd.service's ExecStart= runs P/bin/warmd, --config names P/etc/warmd/warmd.conf,
#      Documentation= names P/share/doc/warmd/README.md, and all three exist; the same for
#      warm-httpd.service and P/etc/warmd/warm-httpd.conf;
#   2. gpu.conf names P/share/warmd/gpu.conf;
#   3. warm.pc says prefix=P, and `pkg-config --cflags --libs warm` gives P's include and
#      lib directories and no flag of the gRPC chain (-DNOMINMAX);
#   4. the same install with DESTDIR=D and --prefix /usr writes ExecStart=/usr/bin/warmd
#      (and /usr/bin/warm-httpd, no --config: both read /etc/warmd) and prefix=/usr (what
#      the Debian package does).
# Usage: check-install-prefix.sh BUILD_DIR
set -eu
B=$(cd "${1:?usage: check-install-prefix.sh BUILD_DIR}" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
configured=$(sed -n 's/^set(WARM_CONFIGURED_PREFIX \[==\[\(.*\)\]==\])$/\1/p' "$B/install-vars.cmake")
P=$T/prefix
[ "$P" != "$configured" ] || fail "the scratch prefix is the configured one"
cmake --install "$B" --prefix "$P" >"$T/install.log" 2>&1 || { cat "$T/install.log"; fail "cmake --install --prefix $P"; }
echo "ok: installed into $P (configured for $configured)"

# ---- 1. the unit --------------------------------------------------------------------------
unit=$(find "$P" -name warmd.service)
[ -n "$unit" ] || fail "no warmd.service under $P"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[ "$exec_start" = "$P/bin/warmd --config=$P/etc/warmd/warmd.conf" ] ||
    fail "ExecStart=$exec_start"
[ -x "$P/bin/warmd" ] || fail "$P/bin/warmd missing"
[ -f "$P/etc/warmd/warmd.conf" ] || fail "$P/etc/warmd/warmd.conf missing"
doc=$(sed -n 's/^Documentation=.* file:\(.*\)$/\1/p' "$unit")
[ "$doc" = "$P/share/doc/warmd/README.md" ] && [ -f "$doc" ] || fail "Documentation= names '$doc'"
if grep -n "$configured/" "$unit"; then fail "warmd.service names the configured prefix"; fi
echo "ok: ExecStart=$exec_start; Documentation= $doc"
# warm-httpd's unit names the settings file installed beside warmd.conf.
hunit=$(find "$P" -name warm-httpd.service)
if [ -n "$hunit" ]; then
    exec_start=$(sed -n 's/^ExecStart=//p' "$hunit")
    [ "$exec_start" = "$P/bin/warm-httpd --config=$P/etc/warmd/warm-httpd.conf" ] ||
        fail "warm-httpd.service: ExecStart=$exec_start"
    [ -f "$P/etc/warmd/warm-httpd.conf" ] || fail "$P/etc/warmd/warm-httpd.conf missing"
    echo "ok: warm-httpd.service: ExecStart=$exec_start"
fi

# ---- 2. gpu.conf --------------------------------------------------------------------------
grep -q "install -D -m 0644 $P/share/warmd/gpu.conf " "$P/share/warmd/gpu.conf" ||
    fail "gpu.conf does not name its own path"
echo "ok: gpu.conf names $P/share/warmd/gpu.conf"

# ---- 3. warm.pc ---------------------------------------------------------------------------
pc=$(find "$P" -name warm.pc)
[ "$(sed -n 's/^prefix=//p' "$pc")" = "$P" ] || fail "warm.pc: $(grep '^prefix=' "$pc")"
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs warm)
[ "$(echo $flags)" = "-I$P/include -L$(dirname "$(dirname "$pc")") -lwarm" ] || fail "pkg-config --cflags --libs warm: $flags"
static=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs --static warm)
case " $flags $static " in
    *NOMINMAX*|*" -D"*) fail "warm.pc passes preprocessor flags on: $flags / $static" ;;
esac
echo "ok: warm.pc prefix=$P; pkg-config --cflags --libs warm: $flags"

# ---- 4. DESTDIR + /usr --------------------------------------------------------------------
D=$T/destdir
DESTDIR=$D cmake --install "$B" --prefix /usr >"$T/install2.log" 2>&1 ||
    { cat "$T/install2.log"; fail "DESTDIR=$D cmake --install --prefix /usr"; }
unit=$(find "$D" -name warmd.service)
[ "$(sed -n 's/^ExecStart=//p' "$unit")" = "/usr/bin/warmd" ] ||
    fail "DESTDIR install: $(grep ^ExecStart= "$unit")"
[ -x "$D/usr/bin/warmd" ] || fail "DESTDIR install: no $D/usr/bin/warmd"
[ "$(sed -n 's/^prefix=//p' "$(find "$D" -name warm.pc)")" = "/usr" ] || fail "DESTDIR install: warm.pc"
[ -f "$D/etc/warmd/warmd.conf" ] || fail "DESTDIR install: no $D/etc/warmd/warmd.conf"
if [ -n "$hunit" ]; then
    hunit=$(find "$D" -name warm-httpd.service)
    [ "$(sed -n 's/^ExecStart=//p' "$hunit")" = "/usr/bin/warm-httpd" ] ||
        fail "DESTDIR install: warm-httpd.service $(grep ^ExecStart= "$hunit")"
    [ -f "$D/etc/warmd/warm-httpd.conf" ] || fail "DESTDIR install: no $D/etc/warmd/warm-httpd.conf"
fi
echo "ok: DESTDIR=... --prefix /usr: ExecStart=/usr/bin/warmd, prefix=/usr, /etc/warmd/warmd.conf${hunit:+, /etc/warmd/warm-httpd.conf}"
echo "1 passed, 0 failed"
