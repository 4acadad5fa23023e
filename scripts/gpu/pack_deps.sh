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
            /usr/include/utf8proc.h /usr/lib/x86_64-linux-gnu/libutf8proc.a /usr/include/httplib.h \
            /usr/include/openssl /usr/include/x86_64-linux-gnu/openssl /usr/include/zlib.h /usr/include/zconf.h \
            /usr/include/brotli; do
  mkdir -p ".gpu-deps$(dirname "$path")"
  cp -r "$path" ".gpu-deps$path"
done
# cpp-httplib is a shared library in Debian: carry it and the libraries it needs (OpenSSL, zlib,
# brotli), with a relocatable pkg-config file (scripts/gpu/env.sh uses it).
lib=.gpu-deps/usr/lib/x86_64-linux-gnu
cp -P /usr/lib/x86_64-linux-gnu/libcpp-httplib.so* /usr/lib/x86_64-linux-gnu/libbrotli*.so* "$lib/"
cp -L /lib/x86_64-linux-gnu/libssl.so.3 /lib/x86_64-linux-gnu/libcrypto.so.3 /lib/x86_64-linux-gnu/libz.so.1 "$lib/"
mkdir -p "$lib/pkgconfig"
sed -e 's|^prefix=.*|prefix=${pcfiledir}/../../..|' -e '/^Requires.private/d' \
  -e 's|^Cflags: -I${includedir}|Cflags: -I${includedir} -I${includedir}/x86_64-linux-gnu|' \
  /usr/lib/x86_64-linux-gnu/pkgconfig/cpp-httplib.pc >"$lib/pkgconfig/cpp-httplib.pc"
# Boost (vt serve's transport, header-only): only the headers it includes, found by the compiler,
# and the CMake package files (they locate the headers relative to themselves).
c++ -std=c++20 -Isrc -M src/server/http_server.cpp | tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u |
  while read -r header; do
    mkdir -p ".gpu-deps$(dirname "$header")"
    cp "$header" ".gpu-deps$header"
  done
mkdir -p .gpu-deps/usr/lib/x86_64-linux-gnu/cmake
cp -r /usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 /usr/lib/x86_64-linux-gnu/cmake/boost_headers-1.74.0 \
  /usr/lib/x86_64-linux-gnu/cmake/BoostDetectToolset-1.74.0.cmake .gpu-deps/usr/lib/x86_64-linux-gnu/cmake/
# xgrammar's C++ sources (structured output), from its PyPI sdist: src/CMakeLists.txt finds them here.
scripts/fetch-xgrammar.sh
mkdir -p .gpu-deps/xgrammar
cp -r .cache/xgrammar/xgrammar-0.2.8 .gpu-deps/xgrammar/
du -sh .gpu-deps
