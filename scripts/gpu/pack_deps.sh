#!/usr/bin/env bash
# Run HERE (not on the GPU machine): copies the Debian-packaged headers, static libraries and
# CMake package files vt builds against into .gpu-deps/ (git-ignored), which the device tool
# carries to the GPU machine (it has no package registry). Nothing here is committed.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
rm -rf .gpu-deps
for path in /usr/include/nlohmann /usr/share/cmake/nlohmann_json /usr/include/CLI /usr/share/cmake/CLI11 \
            /usr/include/gtest /usr/include/gmock /usr/lib/x86_64-linux-gnu/cmake/GTest \
            /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a \
            /usr/lib/x86_64-linux-gnu/libgmock.a /usr/lib/x86_64-linux-gnu/libgmock_main.a \
            /usr/include/pcre2.h /usr/lib/x86_64-linux-gnu/libpcre2-8.a \
            /usr/include/utf8proc.h /usr/lib/x86_64-linux-gnu/libutf8proc.a; do
  mkdir -p ".gpu-deps$(dirname "$path")"
  cp -r "$path" ".gpu-deps$path"
done
du -sh .gpu-deps
