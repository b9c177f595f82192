#!/usr/bin/env bash
# Installs what the aarch64 cross build and its qemu test run need, when missing:
# the cross compiler, qemu-user, and the arm64 multiarch -dev packages the build links
# (pcre2, microhttpd, cJSON; Debian ships no static cJSON, so tests run dynamically under
# qemu with the multiarch loader and libc6:arm64 in /lib/aarch64-linux-gnu).
# As root it uses apt-get (adding the arm64 architecture once); otherwise it prints the commands.
set -euo pipefail
need=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
for p in libc6 libpcre2-dev libcjson-dev libmicrohttpd-dev; do
  dpkg-query -W -f='${Status}' "$p:arm64" 2>/dev/null | grep -q 'ok installed' || need+=("$p:arm64")
done
[ ${#need[@]} -eq 0 ] && exit 0
echo "nextn: installing missing aarch64 packages: ${need[*]}" >&2
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
    apt-get update >/dev/null
  fi
  apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
    || { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends "${need[@]}"; }
else
  echo "nextn: missing packages; run: sudo dpkg --add-architecture arm64 && sudo apt-get update &&" \
       "sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
