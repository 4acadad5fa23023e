#!/usr/bin/env bash
# Puts xgrammar's C++ core (structured output: grammar-constrained token masks) under
# .cache/xgrammar/xgrammar-0.2.8/ (idempotent, checksummed), from its PyPI sdist: the build compiles
# cpp/*.cc, include/ and the header-only 3rdparty/{picojson,dlpack} into a static library
# (src/grammar/CMakeLists.txt). Only what the build needs is unpacked (about 3 MB), so the folder
# can be carried to a machine without internet (the GPU machine) next to the tree.
# The sdist is fetched by its PyPI file address (pip download would build the package to read its
# metadata, which needs the Python build toolchain).
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.2.8
sdist=xgrammar-$version.tar.gz
sha256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
url=https://files.pythonhosted.org/packages/03/0f/29f521535729be740779c2c98b630ef6607cf28be9b669895dd2b821ff63/$sdist
target=.cache/xgrammar
source=$target/xgrammar-$version

[ -f "$source/include/xgrammar/xgrammar.h" ] && exit 0

mkdir -p .cache/downloads "$target"
if [ ! -f .cache/downloads/$sdist ]; then
  echo "fetch-xgrammar: PyPI xgrammar $version sdist (2.6 MB)"
  curl --fail --silent --show-error --location --retry 3 -o .cache/downloads/$sdist.part "$url"
  mv .cache/downloads/$sdist.part .cache/downloads/$sdist
fi
actual=$(sha256sum .cache/downloads/$sdist | cut -d' ' -f1)
if [ "$actual" != "$sha256" ]; then
  echo "fetch-xgrammar: .cache/downloads/$sdist has sha256 $actual, expected $sha256" >&2
  rm -f .cache/downloads/$sdist
  exit 1
fi
tar -xzf .cache/downloads/$sdist -C "$target" "xgrammar-$version/cpp" "xgrammar-$version/include" \
  "xgrammar-$version/3rdparty/picojson" "xgrammar-$version/3rdparty/dlpack/include" "xgrammar-$version/LICENSE" \
  "xgrammar-$version/NOTICE"
echo "fetch-xgrammar: $source"
