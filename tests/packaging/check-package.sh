#!/bin/sh
# Builds the Debian packages (dpkg-buildpackage -b, nocheck), installs them system-wide,
# checks the installed result, runs lintian, and purges the packages again. It changes
# the machine (packages, the system user warm), so it is not a CTest: .ci/run calls it
# after the test suite. Run as root on Debian 12; PID 1 need not be systemd
# (systemd-analyze verify and security --offline work without it, and the maintainer
# scripts skip starting units when /run/systemd/system is absent).
#
# Checks: warmd --version; every file in place (units, sysusers.d, tmpfiles.d, conffile,
# gpu.conf, warmctl, libwarm, warm.h, warm.pc); user and group warm and the state
# directories; the conffile is warmd --print-default-config and loads; units enabled;
# systemd-analyze verify clean; systemd-analyze security --offline=yes --threshold=10
# for the CPU unit and for the unit + gpu.conf drop-in (the threshold is an integer on a
# 0-100 scale: 10 = exposure 1.0); a program builds against libwarm with pkg-config;
# lintian shows no error and no warning outside the reviewed allow-list below; purge
# removes everything but the user, group and any models.
#
# Usage: tests/packaging/check-package.sh
#   KEEP=1     keep the build directory (/tmp/warmd-deb.*)
#   DEBS=DIR   skip the build and check the packages in DIR (a kept build directory)
#   FROM=HEAD  build the last commit instead of the working tree (on a checkout others are
#              editing; CI's checkout is clean, so the two are the same there)
set -eu
cd "$(dirname "$0")/../.."
SRC=$(pwd)
[ "$(id -u)" = 0 ] || { echo "check-package: run as root (it installs packages)"; exit 1; }
export DEBIAN_FRONTEND=noninteractive

# Reviewed lintian warnings (one tag a line; each says why it is accepted):
# (none at present; lintian 2.116.3 reports only two info tags, printed below:
#  no-symbols-control-file for libwarm0, as the API is still moving, and
#  package-supports-alternative-init-but-no-init.d-script, as warmd is systemd-only.)
ALLOW="
"

t0=$(date +%s)
step() { printf '\n== [%ss] %s\n' "$(($(date +%s) - t0))" "$*"; }
fail() { echo "FAIL: $*"; exit 1; }

step "packaging tools"
scripts/deps.sh
need=""
for p in debhelper dpkg-dev lintian; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need="$need $p"
done
if [ -n "$need" ]; then
    apt-get install -y --no-install-recommends $need >/dev/null
fi
echo "debhelper $(dpkg-query -W -f='${Version}' debhelper), lintian $(dpkg-query -W -f='${Version}' lintian), $(systemd-analyze --version | head -1)"

W=$(mktemp -d /tmp/warmd-deb.XXXXXX)
pid=""
cleanup() {
    [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
    [ -z "${run:-}" ] || rm -rf "$run"
    rm -f /etc/systemd/system/warmd.service.d/gpu.conf
    rmdir /etc/systemd/system/warmd.service.d 2>/dev/null || true
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT

version=$(dpkg-parsechangelog -l debian/changelog -S Version)
if [ -n "${DEBS:-}" ]; then
    step "packages from $DEBS"
    cp "$DEBS"/*.deb "$DEBS"/*.changes "$DEBS"/*.buildinfo "$W/"
else
step "build (dpkg-buildpackage -us -uc -b, DEB_BUILD_OPTIONS='nocheck parallel=2')"
T=$W/warmd-$version
mkdir -p "$T"
# The working tree as git sees it (tracked and untracked, minus ignored build dirs).
if [ -n "${FROM:-}" ]; then
    git archive --format=tar "$FROM" | tar -xf - -C "$T"
elif git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard |
        tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$T"
else
    tar --exclude='./build*' --exclude=./.git -cf - . | tar -xf - -C "$T"
fi
start=$(date +%s)
if ! (cd "$T" && DEB_BUILD_OPTIONS="nocheck parallel=2" dpkg-buildpackage -us -uc -b) \
        >"$W/build.log" 2>&1; then
    tail -50 "$W/build.log"
    fail "dpkg-buildpackage failed (log: $W/build.log)"
fi
echo "built in $(($(date +%s) - start)) s:"
fi
ls -l "$W"/*.deb

step "install"
for p in warmd libwarm-dev libwarm0; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "installed"; then
        apt-get purge -y "$p" >/dev/null
    fi
done
arch=$(dpkg --print-architecture)
apt-get install -y --no-install-recommends "$W/warmd_${version}_$arch.deb" \
    "$W/libwarm0_${version}_$arch.deb" "$W/libwarm-dev_${version}_$arch.deb" 2>&1 |
    grep -v '^\(Reading\|Building\|Selecting\|(Reading\)' | tail -20
dpkg-query -W warmd libwarm0 libwarm-dev

step "installed files"
warmd --version
warmd --version | grep -q "^warmd $version " || fail "warmd --version does not say $version"
warmctl --version | grep -q "^warmctl $version" || fail "warmctl --version does not say $version"
unitdir=$(pkg-config --variable=systemdsystemunitdir systemd)
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
for f in /usr/bin/warmd /usr/bin/warmctl /etc/warmd/warmd.conf \
         "$unitdir/warmd.service" "$unitdir/warmd.socket" \
         /usr/lib/sysusers.d/warmd.conf /usr/lib/tmpfiles.d/warmd.conf \
         /usr/share/warmd/gpu.conf /usr/share/doc/warmd/README.md /usr/share/doc/warmd/copyright \
         /usr/lib/$multi/libwarm.so.0 /usr/lib/$multi/libwarm.so /usr/lib/$multi/libwarm.a \
         /usr/include/warm.h /usr/lib/$multi/pkgconfig/warm.pc; do
    [ -e "$f" ] || fail "$f missing"
    echo "  $f"
done
dpkg-query -W -f='${Conffiles}\n' warmd | grep -q "^ /etc/warmd/warmd.conf " ||
    fail "/etc/warmd/warmd.conf is not a conffile"
warmd --print-default-config | cmp -s - /etc/warmd/warmd.conf ||
    fail "/etc/warmd/warmd.conf is not warmd --print-default-config"
[ "$(warmd --print-config)" = "$(warmd --config /dev/null --print-config)" ] ||
    fail "the shipped warmd.conf changes a default"
echo "conffile /etc/warmd/warmd.conf: generated from the schema, loads, sets nothing"
getent passwd warm | grep -q ':/var/lib/warmd:/usr/sbin/nologin$' || fail "no system user warm"
getent group warm >/dev/null || fail "no group warm"
[ "$(stat -c '%U:%G %a' /var/lib/warmd)" = "warm:warm 700" ] || fail "/var/lib/warmd: $(stat -c '%U:%G %a' /var/lib/warmd)"
[ "$(stat -c '%U:%G %a' /var/lib/warmd/models)" = "root:root 755" ] || fail "/var/lib/warmd/models: $(stat -c '%U:%G %a' /var/lib/warmd/models)"
echo "user $(getent passwd warm); /var/lib/warmd warm:warm 0700; models root:root 0755"
[ -L /etc/systemd/system/sockets.target.wants/warmd.socket ] || fail "warmd.socket not enabled"
[ -L /etc/systemd/system/multi-user.target.wants/warmd.service ] || fail "warmd.service not enabled"
echo "enabled: warmd.socket (sockets.target), warmd.service (multi-user.target)"

step "systemd-analyze verify"
out=$(systemd-analyze verify "$unitdir/warmd.service" "$unitdir/warmd.socket" 2>&1) ||
    { echo "$out"; fail "systemd-analyze verify failed"; }
[ -z "$out" ] || { echo "$out"; fail "systemd-analyze verify is not clean"; }
echo "warmd.service warmd.socket: clean"

step "systemd-analyze security --offline=yes --threshold=10"
security() { # LABEL: scores warmd.service as systemd would load it now
    out=$(systemd-analyze security --offline=yes --threshold=10 warmd.service 2>&1) ||
        { echo "$out"; fail "$1: exposure over 1.0"; }
    echo "$out" | grep '^✗' | sed 's/  */ /g'
    echo "$1: $(echo "$out" | sed -n 's/^→ Overall exposure level for //p')"
}
security "CPU variant"
# The GPU variant exactly as README.md tells admins to enable it.
install -D -m 0644 /usr/share/warmd/gpu.conf /etc/systemd/system/warmd.service.d/gpu.conf
out=$(systemd-analyze verify "$unitdir/warmd.service" 2>&1) ||
    { echo "$out"; fail "systemd-analyze verify with gpu.conf failed"; }
[ -z "$out" ] || { echo "$out"; fail "systemd-analyze verify with gpu.conf is not clean"; }
echo "verify warmd.service + gpu.conf: clean"
security "GPU variant (gpu.conf drop-in)"
rm -f /etc/systemd/system/warmd.service.d/gpu.conf
rmdir /etc/systemd/system/warmd.service.d

step "libwarm with pkg-config"
cat >"$W/t.c" <<'EOF'
#include <stdio.h>
#include <warm.h>
int main(void) {
    printf("libwarm %s\n", warm_version());
    return 0;
}
EOF
cc -Wall -Werror -o "$W/t" "$W/t.c" $(pkg-config --cflags --libs warm)
"$W/t" | grep -q "^libwarm $version" || fail "a program linked with -lwarm does not run"
"$W/t"

step "smoke run: the installed warmd as user warm, shipped config (no systemd)"
# What the unit does minus the sandbox: user warm, /etc/warmd/warmd.conf, the state and
# models directories of the package; only the socket path differs (no warmd.socket).
models=${WARM_SHARED_MODELS:-$SRC/../shared/models}
model=""
if [ -f "$models/stories260K.gguf" ]; then
    model=stories260K
    install -m 0644 "$models/stories260K.gguf" /var/lib/warmd/models/
fi
run=$(mktemp -d /tmp/warmd-run.XXXXXX)
chown warm:warm "$run"
setpriv --reuid=warm --regid=warm --init-groups warmd --socket="$run/warmd.sock" >"$W/warmd.log" 2>&1 &
pid=$!
i=0
while [ ! -S "$run/warmd.sock" ] && [ $i -lt 100 ] && kill -0 $pid 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
done
[ -S "$run/warmd.sock" ] || { cat "$W/warmd.log"; fail "warmd did not start as user warm"; }
warmctl --socket "$run/warmd.sock" status | head -5 || { cat "$W/warmd.log"; fail "warmctl status"; }
if [ -n "$model" ]; then
    warmctl --socket "$run/warmd.sock" models | grep -q "$model" ||
        fail "the daemon does not list /var/lib/warmd/models/$model.gguf"
    warmctl --socket "$run/warmd.sock" tokenize "$model" "Once upon a time" ||
        { cat "$W/warmd.log"; fail "user warm cannot load a root-owned model"; }
else
    echo "(no stories260K.gguf in $models: model loading not checked)"
fi
kill -TERM $pid
rc=0
wait $pid || rc=$?
[ $rc = 0 ] || { cat "$W/warmd.log"; fail "warmd exited $rc after SIGTERM"; }
[ "$(stat -c %U /var/lib/warmd/cache)" = warm ] || fail "the prompt cache is not owned by warm"
echo "started, served, stopped with exit 0 on SIGTERM; /var/lib/warmd/cache owned by warm"

step "lintian"
lintian --version
# Exit status is not used: the tags are judged below.
lintian --tag-display-limit 0 --display-info "$W"/warmd_"${version}"_*.changes \
    >"$W/lintian.log" 2>&1 || true
cat "$W/lintian.log"
errors=$(grep '^E: ' "$W/lintian.log" || true)
[ -z "$errors" ] || fail "lintian errors"
bad=""
for tag in $(sed -n 's/^W: [^:]*: \([^ ]*\).*/\1/p' "$W/lintian.log" | sort -u); do
    echo "$ALLOW" | grep -qx "$tag" || bad="$bad $tag"
done
[ -z "$bad" ] || fail "lintian warnings not reviewed:$bad"
echo "lintian: no errors; warnings all reviewed"

step "purge"
apt-get purge -y warmd libwarm-dev libwarm0 >/dev/null
for f in /usr/bin/warmd /etc/warmd "$unitdir/warmd.service" \
         /etc/systemd/system/sockets.target.wants/warmd.socket /var/lib/warmd/cache; do
    [ ! -e "$f" ] || fail "$f left after purge"
done
if [ -n "$model" ]; then
    # An admin's models survive a purge; the empty directories do not.
    [ -f /var/lib/warmd/models/$model.gguf ] || fail "purge removed a model"
    rm /var/lib/warmd/models/$model.gguf
    rmdir /var/lib/warmd/models /var/lib/warmd
else
    [ ! -e /var/lib/warmd ] || fail "/var/lib/warmd left after purge"
fi
echo "purged: binaries, units, enablement links, /etc/warmd, the prompt cache; models kept"
echo
echo "check-package: OK"
