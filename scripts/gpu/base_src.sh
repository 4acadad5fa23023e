#!/usr/bin/env bash
# Run HERE before a device call with BASE=<commit>: writes that commit's tree to .base-src/
# (git-ignored; pass carry [".gpu-deps", ".base-src"]), which wgmma_round.sh builds as the base.
set -euo pipefail
cd "$(dirname "$0")/../.."
commit=$(git rev-parse --short "${1:?usage: base_src.sh <commit>}")
rm -rf .base-src && mkdir .base-src
# Without the golden checkpoints and the docs (the base builds `vt` only): .gpu-deps, this tree and
# the base must fit the 64 MiB carry together.
git archive "$commit" | tar -x -C .base-src --exclude=tests/golden --exclude=docs
echo "$commit" >.base-src/COMMIT
du -sh .base-src
