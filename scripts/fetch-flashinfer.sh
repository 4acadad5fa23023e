#!/usr/bin/env bash
# Puts FlashInfer's CUDA headers and the CUTLASS/CuTe headers it ships with under
# .cache/flashinfer/0.7.2.post1/include/ (idempotent, checksummed), from the PyPI wheel
# flashinfer-python: the prefill attention kernel (src/ops/attention/prefill_sm90.cu) includes
# FlashInfer's Hopper FA3-style prefill (flashinfer/attention/hopper/) from there. Only the header
# trees are unpacked (about 60 MB); scripts/gpu/pack_deps.sh carries the ones the kernel includes
# (as the compiler lists them) to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.7.2.post1
wheel=flashinfer_python-$version-py3-none-any.whl
sha256=bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49
target=.cache/flashinfer/$version
marker=$target/include/flashinfer/attention/hopper/prefill_sm90.cuh

[ -f "$marker" ] && exit 0

mkdir -p .cache/downloads
if [ ! -f .cache/downloads/$wheel ]; then
  echo "fetch-flashinfer: pip download flashinfer-python==$version (62 MB)"
  python3 -m pip download --quiet --no-deps --only-binary :all: --dest .cache/downloads "flashinfer-python==$version"
fi
actual=$(sha256sum .cache/downloads/$wheel | cut -d' ' -f1)
if [ "$actual" != "$sha256" ]; then
  echo "fetch-flashinfer: .cache/downloads/$wheel has sha256 $actual, expected $sha256" >&2
  rm -f .cache/downloads/$wheel
  exit 1
fi
rm -rf "$target.tmp"
mkdir -p "$target.tmp/include"
# Wheel member prefix -> folder under $target.tmp: FlashInfer's headers, CUTLASS's and CuTe's,
# CUTLASS's util headers (FlashInfer's cutlass_utils.cuh includes cutlass/util/*), and the CCCL
# FlashInfer is built against (newer than CUDA 13.0's: cuda::fast_mod_div), which its JIT puts
# ahead of the toolkit's with -I; src/CMakeLists.txt does the same for the kernel's file.
python3 - .cache/downloads/$wheel "$target.tmp" <<'EOF'
import os, shutil, sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
trees = {
    "flashinfer/data/include/": "include/",
    "flashinfer/data/cutlass/include/": "include/",
    "flashinfer/data/cutlass/tools/util/include/": "include/",
    "flashinfer/data/cccl/libcudacxx/include/": "cccl/libcudacxx/include/",
    "flashinfer/data/cccl/cub/cub/": "cccl/cub/cub/",
    "flashinfer/data/cccl/thrust/thrust/": "cccl/thrust/thrust/",
    "flashinfer_python-0.7.2.post1.dist-info/licenses/LICENSE": "LICENSE.flashinfer",
}
with zipfile.ZipFile(wheel) as archive:
    for member in archive.namelist():
        if member.endswith("/"):
            continue
        for prefix, folder in trees.items():
            if member.startswith(prefix):
                path = os.path.join(target, folder + member[len(prefix):]) if prefix.endswith("/") else os.path.join(target, folder)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with archive.open(member) as src, open(path, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                break
EOF
rm -rf "$target"
mv "$target.tmp" "$target"
echo "fetch-flashinfer: $target/include"
