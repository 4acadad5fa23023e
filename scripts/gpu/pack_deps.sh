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
# Boost (vt serve's transport and vt bench serve's client, header-only): only the headers they
# include, as the compiler lists them, and the CMake package files (they locate the headers
# relative to themselves).
cat <(c++ -std=c++20 -Isrc -M src/server/http_server.cpp) \
    <(c++ -std=c++20 -I. -Isrc -M apps/serve_bench_commands.cpp) |
  tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u |
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
# FlashInfer's sm90 prefill attention (header-only), from its PyPI wheel: only the headers
# src/ops/attention/prefill_sm90.cu includes (FlashInfer's, CUTLASS/CuTe's and the CCCL it is
# built against, ~17 MB), as nvcc lists them, packed as a tar.xz (~1 MB) that src/CMakeLists.txt
# unpacks into the build folder.
scripts/fetch-flashinfer.sh
flashinfer_version=0.7.2.post1
flashinfer=$PWD/.cache/flashinfer/$flashinfer_version
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
PATH="$PATH:/usr/local/cuda/bin" nvcc -M -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
    -I"$flashinfer/cccl/cub" -I"$flashinfer/cccl/libcudacxx/include" -I"$flashinfer/cccl/thrust" -Isrc \
    -isystem "$flashinfer/include" -DVT_WITH_CUDA=1 src/ops/attention/prefill_sm90.cu |
  tr ' \\' '\n\n' | grep "^$flashinfer/" | sort -u |
  while read -r header; do
    relative=${header#"$flashinfer"/}
    mkdir -p "$staging/$(dirname "$relative")"
    cp "$header" "$staging/$relative"
  done
cp "$flashinfer/LICENSE.flashinfer" "$staging/"
tar -cJf ".gpu-deps/flashinfer-$flashinfer_version.tar.xz" -C "$staging" .
du -sh .gpu-deps
