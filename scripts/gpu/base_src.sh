#!/usr/bin/env bash
# Run HERE before a device call: base_src.sh <commit> [folder] writes that commit's tree to
# .base-src/ (git-ignored; pass carry [".gpu-deps", ".base-src"]), which decode_ab.sh and
# wgmma_round.sh build as the base; folder .alt-src/ (carried too) is decode_ab.sh's third build.
set -euo pipefail
cd "$(dirname "$0")/../.."
commit=$(git rev-parse --short "${1:?usage: base_src.sh <commit> [.base-src | .alt-src]}")
folder=${2:-.base-src}
case "$folder" in .base-src | .alt-src) ;; *) echo "base_src.sh: folder .base-src or .alt-src" >&2; exit 2 ;; esac
rm -rf "$folder" && mkdir "$folder"
# Without the golden checkpoints and the docs (the base builds `vt` only): .gpu-deps, this tree and
# the base must fit the 64 MiB carry together.
git archive "$commit" | tar -x -C "$folder" --exclude=tests/golden --exclude=docs
echo "$commit" >"$folder/COMMIT"
du -sh "$folder"
