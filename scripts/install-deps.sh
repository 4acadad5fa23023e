#!/usr/bin/env bash
# Installs vt's build and test dependencies from Debian packages (idempotent; needs root or sudo).
set -euo pipefail
packages=(build-essential cmake ninja-build nlohmann-json3-dev libcli11-dev libgtest-dev
          clang libclang-rt-14-dev
          pkg-config libpcre2-dev libutf8proc-dev  # the tokenizer: regex with Unicode classes, NFC
          libboost-dev)  # vt serve's HTTP transport, vt bench serve's client (Asio, Beast; header-only)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
