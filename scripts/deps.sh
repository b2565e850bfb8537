#!/bin/sh
# Installs the Debian 12 packages warmd builds and tests with (as root; a no-op when present).
set -e
PKGS="build-essential cmake ninja-build pkg-config liblmdb-dev lmdb-utils libxxhash-dev
  libpcre2-dev libsystemd-dev systemd libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  protobuf-compiler protobuf-compiler-grpc python3 python3-grpcio python3-h2 python3-jinja2 libfiu-dev fiu-utils
  libmicrohttpd-dev libjansson-dev libedit-dev libssl-dev curl"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends $missing
fi
