#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps from scripts/gpu/pack_deps.sh, and .whl with
# the fla-core wheel, below): issue 34's fair peers in one call. Each part is its own process, run
# one after the other (the 27B in bf16 is ~54 GB: vt's and HF's models are never resident together),
# in this order:
#   build          `vt` only, into build-gpu (as long_context.sh)
#   vt_bf16        `vt bench decode --synthetic qwen3.5-27b --weights bf16` at VT_BATCHES (1,16,64), the
#                  batch list repeated ROUNDS (5) times in one process: VT_STEPS (32) timed steps a row,
#                  each batch's median and min..max over the rounds
#   hf_bf16_torch  scripts/gpu/hf_decode.py --precision bf16 --gdn torch: HF transformers at the same
#                  shape and precision, HF_BATCHES (1,16), ROUNDS rounds of HF_STEPS (10) steps after a
#                  1,024-token prefill; its Gated DeltaNet on HF's torch path (what the image has)
#   vt_fp8         as vt_bf16 with --weights fp8 (the README's configuration; tunes its GEMM plan)
#   vt_35b_fp8     only when PARTS names it (~30 s): the same for the synthetic Qwen3.5-35B-A3B, the
#                  README's MoE row (vt alone)
#   hf_fp8         hf_decode.py --precision fp8: HF's FineGrainedFP8 (128x128 blocks, W8A8). It needs
#                  transformers' Hub kernel kernels-community/finegrained-fp8 through the `kernels`
#                  package; the image has neither and no network, so this part is expected to stop in
#                  hf_decode.py's check: "unavailable" with the reason (its exit 3; not a failure here)
#   gemm           scripts/gpu/gemm_round.sh: `vt bench gemm` (27B, 35B-A3B) with its fair cuBLASLt
#                  peers (the fastest of up to 16 heuristic algorithms, FP8 scales in their own layout),
#                  scaled_mm_peer.py (torch._scaled_mm) and gemm_acceptance.py's table
#   hf_bf16_fla    as hf_bf16_torch with the GDN on flash-linear-attention's Triton kernels, HF's fastest
#                  path (the carried fla-core wheel): last, its Triton compile being the one time not
#                  yet measured anywhere. The table sets vt beside the faster HF row.
# then the GEMM acceptance table and peers_table.py's table last. A part that fails prints its error
# and the others still run; the exit status is non-zero if any part failed, was cut or skipped.
# PARTS (default vt_bf16,hf_bf16,vt_fp8,hf_fp8,gemm; hf_bf16 is both HF bf16 parts) picks parts;
# HF_GDN=torch|fla runs one of the two HF bf16 parts (default auto: both); DEADLINE (seconds of this
# script, default 570) bounds every part, so the tables print inside one 600 s call; VT_COMMIT
# labels vt's rows (the machine's copy has no git history).
#
# Predicted wall time (H100; the H200 a little less; written 2026-12-07, before the first call):
#   build          60-120 s (16 cores; 56 and 121 s in earlier calls' logs)
#   vt_bf16        ~25 s (start-up ~10 s, then 5 x (3 warm-up + 32 timed + 3 gate) steps at ~15/20/34 ms)
#   hf_bf16_torch  ~60 s: imports ~10 s, the 54 GB model built on the GPU ~10 s, per batch a prefill
#                  (~5 s at 16 x 1,024) and 2 + 5 x 10 steps at ~110-150 ms (111-130 ms measured on the
#                  H200 at 64 layers, batch 1 and 16, in earlier calls: ~8 s a batch)
#   vt_fp8         ~35 s (as vt_bf16, plus the FP8 GEMM plan tuned at start-up)
#   hf_fp8         ~15 s (imports, then the kernel check stops it; were it to run, ~50 s)
#   gemm           ~60-150 s, capped at 240 (never timed whole: 7 shapes x 6 M on the 27B and 3 M on the
#                  35B-A3B, each backend + up to 2 x 16 cuBLASLt algorithms + the read floor;
#                  torch._scaled_mm ~20 s)
#   hf_bf16_fla    ~50 s + fla's Triton compile (its autotuned chunk kernels at the first prefill, the
#                  recurrent one at the first step: guessed 30-120 s), capped by DEADLINE
#   total          ~325-575 s; without the fla part ~245-405 s. DEADLINE cuts the fla part first.
# Logs: $OUT/peers_round.tar.gz (each part's stdout and stderr, the GEMM logs under gemm/) and
# $OUT/peers_table.md; gemm_round.sh also writes $OUT/gemm_round.tar.gz.
#
# The fla-core wheel (1 MB, pure Python; einops, its one requirement, is on the image), made here
# once (.whl/ is ignored):
#   python3 -m pip download --no-deps -d .whl fla-core==0.6.0
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
DEADLINE=${DEADLINE:-570}
PARTS=${PARTS:-vt_bf16,hf_bf16,vt_fp8,hf_fp8,gemm}
CONTEXT=${CONTEXT:-1024}
ROUNDS=${ROUNDS:-5}
VT_BATCHES=${VT_BATCHES:-1,16,64}
VT_STEPS=${VT_STEPS:-32}
HF_BATCHES=${HF_BATCHES:-1,16}
HF_STEPS=${HF_STEPS:-10}
HF_GDN=${HF_GDN:-auto}
export PYTHONUNBUFFERED=1
status=0
: >"$LOGS/parts.tsv"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1 | tee "$LOGS/gpu.txt"
echo "${VT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}" >"$LOGS/commit.txt"
printf '{"context": %s, "rounds": %s, "vt_batches": "%s", "vt_steps": %s, "hf_batches": "%s", "hf_steps": %s}\n' \
  "$CONTEXT" "$ROUNDS" "$VT_BATCHES" "$VT_STEPS" "$HF_BATCHES" "$HF_STEPS" >"$LOGS/settings.json"

want() { [[ ",$PARTS," == *",$1,"* ]]; }
note() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$LOGS/parts.tsv"; }  # part, result, wall seconds

# part NAME CAP LEAST COMMAND...: COMMAND under `timeout` for CAP seconds or what is left before
# DEADLINE (less 15 s for the tables), skipped if that is under LEAST; stdout and stderr in
# $LOGS/NAME.out and .err; the result in parts.tsv. Exit 3 of a hf_* part is "unavailable".
part() {
  local name=$1 cap=$2 least=$3 start=$SECONDS left allowed code reason
  shift 3
  left=$((DEADLINE - SECONDS - 15))
  if ((left < least)); then
    status=1
    note "$name" "skipped: $left s left before DEADLINE=$DEADLINE (needs $least)" 0
    echo "SKIPPED: $name ($left s left)"
    return 1
  fi
  allowed=$((cap < left ? cap : left))
  echo "== $name (at most $allowed s)"
  timeout --kill-after=10 "$allowed" "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
  code=$?
  reason=$(grep -v '^\s*$' "$LOGS/$name.err" | tail -1 | cut -c1-400)
  if ((code == 0)); then
    note "$name" ok $((SECONDS - start))
  elif ((code == 3)) && [[ $name == hf_* ]]; then
    reason=$(grep -h 'unavailable:' "$LOGS/$name.err" | tail -1 | sed 's/.*unavailable: //')
    note "$name" "unavailable: $reason" $((SECONDS - start))
    echo "UNAVAILABLE: $name: $reason"
  elif ((code == 124 || code == 137)); then
    status=1
    note "$name" "CUT at $allowed s" $((SECONDS - start))
    echo "CUT at $allowed s: $name"; tail -5 "$LOGS/$name.err"
  else
    status=1
    note "$name" "FAILED (exit $code): $reason" $((SECONDS - start))
    echo "FAILED (exit $code): $name"; tail -5 "$LOGS/$name.err"
  fi
  echo "   $name: $((SECONDS - start)) s"
  return $code
}

# The batch list once per round: "1,16" x 3 -> "1,16,1,16,1,16" (vt times each row on its own).
repeat_list() { local out=$1 i; for ((i = 1; i < $2; i++)); do out+=",$1"; done; echo "$out"; }

built=0
if want vt_bf16 || want vt_fp8 || want vt_35b_fp8 || want gemm; then
  nvcc --version | tail -1 >"$LOGS/nvcc.txt"
  # shellcheck disable=SC2016  # expanded by the inner bash
  part build 300 30 bash -c 'cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON \
      -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps/usr" && cmake --build build-gpu -j "$(nproc)" --target vt' && built=1
  ((built)) || grep -E "error" -A3 "$LOGS/build.out" | head -30
fi

vt_decode() {  # part name, weights[, model]
  if ! want "$1"; then return; fi
  if ((!built)); then status=1; note "$1" "skipped: no vt build" 0; return; fi
  part "$1" 150 20 env VT_CACHE_DIR="$LOGS/plan" "$VT" bench decode --synthetic "${3:-qwen3.5-27b}" --weights "$2" \
    --batch "$(repeat_list "$VT_BATCHES" "$ROUNDS")" --context "$CONTEXT" --steps "$VT_STEPS" --json
}

# HF's Python path: the carried fla-core wheel, installed outside the tree (HF_GDN=torch skips it).
HF_ENV=(PYTHONUNBUFFERED=1)
fla=0
if [ "$HF_GDN" != torch ] && { want hf_bf16 || want hf_fp8; }; then
  if ! ls .whl/fla_core-*.whl >/dev/null 2>&1; then
    echo "no .whl/fla_core-*.whl carried: HF's GDN on its torch path only"
  elif python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/vt-peers-site .whl/fla_core-*.whl >"$LOGS/pip_fla.log" 2>&1; then
    HF_ENV+=(PYTHONPATH="/tmp/vt-peers-site${PYTHONPATH:+:$PYTHONPATH}")
    fla=1
  else
    echo "the carried fla-core wheel did not install (pip_fla.log): HF's GDN on its torch path only"
  fi
fi
hf_decode() {  # part name, cap, precision, gdn
  part "$1" "$2" 40 env "${HF_ENV[@]}" python3 scripts/gpu/hf_decode.py --precision "$3" --gdn "$4" \
    --batch "$HF_BATCHES" --context "$CONTEXT" --steps "$HF_STEPS" --rounds "$ROUNDS" --json-out "$LOGS/$1.json"
}

vt_decode vt_bf16 bf16
# HF bf16 on its torch GDN path first (its time is known), on fla's kernels last (their Triton
# compile is not): the table compares vt with the faster of the two.
if want hf_bf16 && [ "$HF_GDN" != fla ]; then
  hf_decode hf_bf16_torch 150 bf16 torch
fi
vt_decode vt_fp8 fp8
vt_decode vt_35b_fp8 fp8 qwen3.5-35b-a3b  # not in the default PARTS: the README's MoE row, no HF peer
if want hf_fp8; then
  hf_decode hf_fp8 150 fp8 auto  # auto: fla's GDN where carried, as the bf16 row it is set beside
fi
if want gemm; then
  if ((built)); then
    part gemm 240 60 env GEMM_LOGS="$LOGS/gemm" bash scripts/gpu/gemm_round.sh
  else
    status=1; note gemm "skipped: no vt build" 0
  fi
fi
if want hf_bf16 && [ "$HF_GDN" != torch ]; then
  if ((fla)); then
    hf_decode hf_bf16_fla 300 bf16 fla
  else  # a failure only where HF_GDN=fla asked for it
    [ "$HF_GDN" = fla ] && status=1
    note hf_bf16_fla "skipped: no fla-core wheel installed from .whl" 0
  fi
fi

tar -czf "$OUT/peers_round.tar.gz" -C "$LOGS" .
if [ -f "$LOGS/gemm.out" ]; then
  echo; echo "== GEMM acceptance (27B, M <= 16; gemm_round.sh)"
  sed -n '/^== acceptance/,$p' "$LOGS/gemm.out" | tail -n +2
fi
python3 scripts/gpu/peers_table.py "$LOGS" | tee "$OUT/peers_table.md" || status=1
exit $status
