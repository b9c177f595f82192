#!/usr/bin/env bash
# Installs the Debian packages the build needs, when they are missing.
# Runs from `make` before CMake; as root it uses apt-get, otherwise it prints the exact command.
set -euo pipefail
need=()
have_pc() { pkg-config --exists "$1" 2>/dev/null; }
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
if command -v pkg-config >/dev/null 2>&1; then
  have_pc libpcre2-8 || need+=(libpcre2-dev)
  have_pc libmicrohttpd || need+=(libmicrohttpd-dev)
  have_pc libcjson || need+=(libcjson-dev)
else
  need+=(libpcre2-dev libmicrohttpd-dev libcjson-dev)
fi
# curl and jq drive the HTTP script tests.
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v jq >/dev/null 2>&1 || need+=(jq)
# numpy (Debian's, for /usr/bin/python3) runs the independent references under tests/ref/.
/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || need+=(python3-numpy)
[ ${#need[@]} -eq 0 ] && exit 0
echo "nextn: installing missing packages: ${need[*]}" >&2
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
    || { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends "${need[@]}"; }
else
  echo "nextn: missing packages; run: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
