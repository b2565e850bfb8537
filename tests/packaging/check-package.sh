#!/bin/sh
# Builds the Debian packages (dpkg-buildpackage -b, nocheck), installs them system-wide,
# checks the installed result, runs lintian, and purges the packages again. It changes
# the machine (packages, the system user warm), so it is not a CTest: .ci/run calls it
# after the test suite. Run as root on Debian 12; PID 1 need not be systemd
# (systemd-analyze verify and security --offline work without it, and the maintainer
# scripts skip starting units when /run/systemd/system is absent).
#
# Checks: warmd --version; every file in place (units, sysusers.d, tmpfiles.d, conffile,
# the drop-in directory, gpu.conf, warmctl, warm-gguf, warm-bench and their manuals,
# libwarm, warm.h, warm.pc, the Python client and its example); the installed README and
# the unit comments refer to nothing admins lack; user and group warm and the state
# directories; the conffile is warmd --print-default-config and loads; the conffile
# warm-httpd.conf lists every setting of warm-httpd commented out and sets nothing; drop-ins in
# /etc/warmd/warmd.conf.d are read in lexical order and a drop-in with two errors gets
# both reported with file:line; units enabled; systemd-analyze verify clean;
# systemd-analyze security --offline=yes --threshold=10 for the CPU unit and for the unit
# + gpu.conf drop-in (the threshold is an integer on a 0-100 scale: 10 = exposure 1.0);
# warm.pc says prefix=/usr and `pkg-config --cflags --libs warm` gives exactly -lwarm;
# client/README.md's example compiles with -Wall -Wextra -Werror against the installed
# package; the smoke run (the installed warmd as user warm, its socket set by a drop-in)
# serves warmctl, the README example (whose output ends in a newline) and
# `import warm_client` and examples/stream.py from python3-warm with no checkout on the path; warm-gguf
# --supported and --check work; `cmake --install --prefix P` of the package's build tree
# points at P (check-install-prefix.sh); lintian shows no error and no warning outside
# the reviewed allow-list below; purge removes everything but the user, group and models.
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
for p in debhelper dpkg-dev dh-python lintian; do
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
    rm -f /etc/warmd/warmd.conf.d/40-check.conf /etc/warmd/warmd.conf.d/50-check.conf \
        /etc/warmd/warmd.conf.d/60-bad.conf /etc/warmd/warmd.conf.d/50-smoke.conf
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
for p in python3-warm warmd libwarm-dev libwarm0; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "installed"; then
        apt-get purge -y "$p" >/dev/null
    fi
done
arch=$(dpkg --print-architecture)
# The README's install line: every package its next section uses.
grep -q 'apt-get install ./../warmd_\*.deb ./../libwarm0_\*.deb \\$' README.md &&
    grep -q '^    ./../libwarm-dev_\*.deb ./../python3-warm_\*.deb$' README.md ||
    fail "README.md's install line does not install warmd, libwarm0, libwarm-dev and python3-warm"
apt-get install -y --no-install-recommends "$W/warmd_${version}_$arch.deb" \
    "$W/libwarm0_${version}_$arch.deb" "$W/libwarm-dev_${version}_$arch.deb" \
    "$W/python3-warm_${version}_all.deb" 2>&1 |
    grep -v '^\(Reading\|Building\|Selecting\|(Reading\)' | tail -20
dpkg-query -W warmd libwarm0 libwarm-dev python3-warm

step "installed files"
warmd --version
warmd --version | grep -q "^warmd $version " || fail "warmd --version does not say $version"
warmctl --version | grep -q "^warmctl $version" || fail "warmctl --version does not say $version"
unitdir=$(pkg-config --variable=systemdsystemunitdir systemd)
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
for f in /usr/bin/warmd /usr/bin/warmctl /etc/warmd/warmd.conf \
         "$unitdir/warmd.service" "$unitdir/warmd.socket" \
         /usr/bin/warm-httpd "$unitdir/warm-httpd.service" "$unitdir/warm-httpd.socket" \
         /etc/warmd/warmd.conf.d/10-warm-httpd.conf /etc/warmd/warm-httpd.conf \
         /usr/lib/sysusers.d/warmd.conf /usr/lib/tmpfiles.d/warmd.conf \
         /usr/share/warmd/gpu.conf /usr/share/doc/warmd/README.md /usr/share/doc/warmd/copyright \
         /usr/lib/$multi/libwarm.so.0 /usr/lib/$multi/libwarm.so /usr/lib/$multi/libwarm.a \
         /usr/include/warm.h /usr/lib/$multi/pkgconfig/warm.pc \
         /usr/bin/warm-gguf /usr/bin/warm-bench /usr/share/man/man1/warm-gguf.1.gz \
         /usr/share/man/man1/warm-bench.1.gz /usr/share/man/man1/warm-httpd.1.gz \
         /etc/warmd/warmd.conf.d \
         /usr/lib/python3/dist-packages/warm_client/__init__.py \
         /usr/lib/python3/dist-packages/warm/v1/warm_pb2.py \
         /usr/lib/python3/dist-packages/warm/v1/warm_pb2_grpc.py \
         /usr/share/doc/python3-warm/examples/stream.py; do
    [ -e "$f" ] || fail "$f missing"
    echo "  $f"
done
cmp -s packaging/README.installed.md /usr/share/doc/warmd/README.md ||
    fail "/usr/share/doc/warmd/README.md is not packaging/README.installed.md"
if grep -n 'scripts/\|build/\|build-\|DESIGN\|tests/\|\.\./shared' /usr/share/doc/warmd/README.md; then
    fail "the installed README refers to the source tree"
fi
if grep -n 'DESIGN\|P0-\|reliability-tests\|packaging/\|cmake/' "$unitdir/warmd.service" \
        "$unitdir/warmd.socket" /usr/share/warmd/gpu.conf /usr/lib/sysusers.d/warmd.conf \
        /usr/lib/tmpfiles.d/warmd.conf; then
    fail "an installed unit or drop-in refers to documents admins do not have"
fi
echo "installed README and unit comments: written for the installed package"
dpkg-query -W -f='${Conffiles}\n' warmd | grep -q "^ /etc/warmd/warmd.conf " ||
    fail "/etc/warmd/warmd.conf is not a conffile"
warmd --print-default-config | cmp -s - /etc/warmd/warmd.conf ||
    fail "/etc/warmd/warmd.conf is not warmd --print-default-config"
dpkg-query -W -f='${Conffiles}\n' warmd | grep -q "^ /etc/warmd/warmd.conf.d/10-warm-httpd.conf " ||
    fail "/etc/warmd/warmd.conf.d/10-warm-httpd.conf is not a conffile"
# The one setting the package makes: warmd trusts warm-httpd's user (the drop-in).
warmd --print-config | grep -qx "trusted_proxy_uids = $(id -u warm-httpd)" ||
    fail "the drop-in 10-warm-httpd.conf does not make warm-httpd a trusted proxy"
[ "$(warmd --print-config | grep -v '^trusted_proxy_uids = ')" = \
  "$(warmd --config /dev/null --print-config | grep -v '^trusted_proxy_uids = ')" ] ||
    fail "the shipped warmd.conf or its drop-in changes a default besides trusted_proxy_uids"
# warm-httpd's settings file (README.md and its CORS refusal name it): a conffile, every
# key of warm-httpd --print-config commented out, loading as exactly the defaults.
dpkg-query -W -f='${Conffiles}\n' warmd | grep -q "^ /etc/warmd/warm-httpd.conf " ||
    fail "/etc/warmd/warm-httpd.conf is not a conffile"
warm-httpd --config=/dev/null --print-config >"$W/httpd-defaults"
warm-httpd --print-config | cmp -s - "$W/httpd-defaults" ||
    fail "the shipped /etc/warmd/warm-httpd.conf changes a default"
for key in $(sed -n 's/^\([a-z_0-9]*\) = .*/\1/p' "$W/httpd-defaults"); do
    [ "$(grep -c "^#$key =" /etc/warmd/warm-httpd.conf)" = 1 ] ||
        fail "/etc/warmd/warm-httpd.conf does not list $key once"
done
echo "conffile /etc/warmd/warm-httpd.conf: every setting of warm-httpd, commented out"
echo "conffile /etc/warmd/warmd.conf: generated from the schema, loads, sets nothing;"
echo "conffile /etc/warmd/warmd.conf.d/10-warm-httpd.conf: trusted_proxy_uids = warm-httpd ($(id -u warm-httpd))"
getent passwd warm | grep -q ':/var/lib/warmd:/usr/sbin/nologin$' || fail "no system user warm"
getent group warm >/dev/null || fail "no group warm"
[ "$(stat -c '%U:%G %a' /var/lib/warmd)" = "warm:warm 700" ] || fail "/var/lib/warmd: $(stat -c '%U:%G %a' /var/lib/warmd)"
[ "$(stat -c '%U:%G %a' /var/lib/warmd/models)" = "root:root 755" ] || fail "/var/lib/warmd/models: $(stat -c '%U:%G %a' /var/lib/warmd/models)"
echo "user $(getent passwd warm); /var/lib/warmd warm:warm 0700; models root:root 0755"
[ -L /etc/systemd/system/sockets.target.wants/warmd.socket ] || fail "warmd.socket not enabled"
[ -L /etc/systemd/system/multi-user.target.wants/warmd.service ] || fail "warmd.service not enabled"
echo "enabled: warmd.socket (sockets.target), warmd.service (multi-user.target)"
# warm-httpd: its own user, primary group warm (it opens /run/warmd.sock); its socket enabled.
getent passwd warm-httpd | grep -q ':/usr/sbin/nologin$' || fail "no system user warm-httpd"
id -nG warm-httpd | grep -qw warm || fail "warm-httpd is not in group warm"
[ -L /etc/systemd/system/sockets.target.wants/warm-httpd.socket ] || fail "warm-httpd.socket not enabled"
warm-httpd --version | grep -q "^warm-httpd " || fail "warm-httpd --version"
echo "enabled: warm-httpd.socket (user $(id warm-httpd))"

step "systemd-analyze verify"
out=$(systemd-analyze verify "$unitdir/warmd.service" "$unitdir/warmd.socket" 2>&1) ||
    { echo "$out"; fail "systemd-analyze verify failed"; }
[ -z "$out" ] || { echo "$out"; fail "systemd-analyze verify is not clean"; }
echo "warmd.service warmd.socket: clean"
out=$(systemd-analyze verify "$unitdir/warm-httpd.service" "$unitdir/warm-httpd.socket" 2>&1) ||
    { echo "$out"; fail "systemd-analyze verify of warm-httpd's units failed"; }
[ -z "$out" ] || { echo "$out"; fail "systemd-analyze verify of warm-httpd's units is not clean"; }
echo "warm-httpd.service warm-httpd.socket: clean"

step "systemd-analyze security --offline=yes --threshold=10"
security() { # LABEL: scores warmd.service as systemd would load it now
    out=$(systemd-analyze security --offline=yes --threshold=10 warmd.service 2>&1) ||
        { echo "$out"; fail "$1: exposure over 1.0"; }
    echo "$out" | grep '^✗' | sed 's/  */ /g'
    echo "$1: $(echo "$out" | sed -n 's/^→ Overall exposure level for //p')"
}
security "CPU variant"
out=$(systemd-analyze security --offline=yes --threshold=10 warm-httpd.service 2>&1) ||
    { echo "$out"; fail "warm-httpd.service: exposure over 1.0"; }
echo "$(echo "$out" | sed -n 's/^→ Overall exposure level for //p') (warm-httpd)"
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
grep -qx 'prefix=/usr' /usr/lib/$multi/pkgconfig/warm.pc ||
    fail "warm.pc: $(grep prefix= /usr/lib/$multi/pkgconfig/warm.pc)"
flags=$(pkg-config --cflags --libs warm)
[ "$(echo $flags)" = "-lwarm" ] || fail "pkg-config --cflags --libs warm: '$flags'"
case "$(pkg-config --cflags --static warm)" in
    *-D*) fail "pkg-config --cflags --static warm: $(pkg-config --cflags --static warm)" ;;
esac
echo "warm.pc: prefix=/usr; pkg-config --cflags --libs warm: $flags"
# client/README.md's example, as a user copies it (run in the smoke run below).
awk '/^```c$/ { p = 1; next } /^```$/ { p = 0 } p' client/README.md >"$W/app.c"
[ -s "$W/app.c" ] || fail "no C example in client/README.md"
cc -Wall -Wextra -Werror -o "$W/app" "$W/app.c" $(pkg-config --cflags --libs warm) ||
    fail "client/README.md's example does not compile warning-free"
echo "client/README.md's example: compiled with -Wall -Wextra -Werror"

step "tools: warm-gguf, warm-bench"
warm-gguf --supported >"$W/supported" || fail "warm-gguf --supported"
cat "$W/supported"
grep -q '^  llama$' "$W/supported" && grep -q '^  Q8_0 ' "$W/supported" ||
    fail "warm-gguf --supported lists no llama / Q8_0"
warm-bench 2>&1 | grep -qi 'usage' || fail "warm-bench does not run (no usage message)"

step "drop-ins: /etc/warmd/warmd.conf.d"
printf 'threads = 3\n' >/etc/warmd/warmd.conf.d/50-check.conf
printf 'threads = 2\nmax_loaded_models = 1\n' >/etc/warmd/warmd.conf.d/40-check.conf
warmd --print-config | grep -qx 'threads = 3' || fail "50-check.conf is not read after 40-check.conf"
warmd --print-config | grep -qx 'max_loaded_models = 1' || fail "40-check.conf is not honoured"
printf 'threads = lots\nno_such_key = 1\n' >/etc/warmd/warmd.conf.d/60-bad.conf
rc=0
warmd --print-config >"$W/bad.out" 2>&1 || rc=$?
cat "$W/bad.out"
[ $rc = 2 ] || fail "a bad drop-in: exit $rc, expected 2"
grep -q '/etc/warmd/warmd.conf.d/60-bad.conf:1: threads:' "$W/bad.out" &&
    grep -q '^/etc/warmd/warmd.conf.d/60-bad.conf:2: unknown key' "$W/bad.out" ||
    fail "a drop-in with two errors does not report both with file:line"
rm /etc/warmd/warmd.conf.d/40-check.conf /etc/warmd/warmd.conf.d/50-check.conf \
    /etc/warmd/warmd.conf.d/60-bad.conf
echo "drop-ins read in lexical order after warmd.conf; both errors of a bad one reported"

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
# The socket path comes from a drop-in, as an admin would set it.
printf 'socket = %s/warmd.sock\n' "$run" >/etc/warmd/warmd.conf.d/50-smoke.conf
setpriv --reuid=warm --regid=warm --init-groups warmd >"$W/warmd.log" 2>&1 &
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
    # client/README.md's example against the installed library: text, a final newline.
    WARM_SOCKET=$run/warmd.sock "$W/app" "$model" >"$W/app.out" ||
        { cat "$W/app.out"; fail "client/README.md's example failed"; }
    cat "$W/app.out"
    [ "$(tail -c 1 "$W/app.out" | od -An -c | tr -d ' ')" = '\n' ] ||
        fail "client/README.md's example does not end its output with a newline"
    grep -q '^\[[0-9]* prompt tokens, [0-9]* from the cache, [0-9]* generated\]$' "$W/app.out" ||
        fail "client/README.md's example prints no summary line"
    # The installed Python client: no checkout, no WARM_PYTHON, no PYTHONPATH.
    (cd / && env -u WARM_PYTHON -u PYTHONPATH WARM_SOCKET="$run/warmd.sock" /usr/bin/python3 -c "
import warm_client
assert warm_client.__file__.startswith('/usr/lib/python3/dist-packages/'), warm_client.__file__
with warm_client.Client() as c:
    names = [m.name for m in c.models()]
    assert '$model' in names, names
    s = c.generate('$model', 'Once upon a time', max_tokens=8)
    text = ''.join(s)
    assert s.summary.generated_tokens > 0, s.summary
print('python3-warm:', warm_client.__file__, 'generated', repr(text))
") || fail "import warm_client from python3-warm"
    # The example python3-warm ships (README.md points at it), run as a user would.
    (cd / && env -u WARM_PYTHON -u PYTHONPATH /usr/share/doc/python3-warm/examples/stream.py \
        --socket "$run/warmd.sock" "$model" "Once upon a time" -n 8) >"$W/stream.out" ||
        fail "/usr/share/doc/python3-warm/examples/stream.py failed"
    [ -s "$W/stream.out" ] || fail "stream.py printed nothing"
    echo "python3-warm's examples/stream.py: $(head -c 60 "$W/stream.out")"
    warm-gguf --check "/var/lib/warmd/models/$model.gguf" || fail "warm-gguf --check $model.gguf"
else
    echo "(no stories260K.gguf in $models: model loading not checked)"
fi
kill -TERM $pid
rc=0
wait $pid || rc=$?
[ $rc = 0 ] || { cat "$W/warmd.log"; fail "warmd exited $rc after SIGTERM"; }
rm /etc/warmd/warmd.conf.d/50-smoke.conf
[ "$(stat -c %U /var/lib/warmd/cache)" = warm ] || fail "the prompt cache is not owned by warm"
echo "started, served, stopped with exit 0 on SIGTERM; /var/lib/warmd/cache owned by warm"

step "cmake --install --prefix P of the package's build tree"
obj=${T:-}/obj-$(dpkg-architecture -qDEB_HOST_GNU_TYPE)
if [ -n "${T:-}" ] && [ -d "$obj" ]; then
    sh tests/packaging/check-install-prefix.sh "$obj"
else
    echo "(DEBS=...: no build tree, not checked)"
fi

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
apt-get purge -y python3-warm warmd libwarm-dev libwarm0 >/dev/null
for f in /usr/bin/warmd /etc/warmd "$unitdir/warmd.service" \
         /etc/systemd/system/sockets.target.wants/warmd.socket /var/lib/warmd/cache \
         /usr/bin/warm-httpd "$unitdir/warm-httpd.service" \
         /etc/systemd/system/sockets.target.wants/warm-httpd.socket; do
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
