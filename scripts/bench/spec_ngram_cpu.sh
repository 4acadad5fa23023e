#!/usr/bin/env bash
# Plain vs n-gram speculative decoding on an edit-like (copy) prompt, interleaved repetitions;
# one JSON line per run (docs/perf/2026-11-29-spec-ngram-cpu.md).
#   scripts/bench/spec_ngram_cpu.sh VT MODEL PROMPT_FILE [REPEATS]
vt=$1; model=$2; prompt_file=$3; reps=${4:-3}
prompt=$(cat "$prompt_file"; printf x); prompt=${prompt%x}
for rep in $(seq "$reps"); do
  for config in "" "--speculative ngram --num-draft 2" "--speculative ngram --num-draft 4" "--speculative ngram --num-draft 8" "--speculative ngram --num-draft 8 --adaptive-draft"; do
    # shellcheck disable=SC2086
    "$vt" generate --model "$model" --prompt "$prompt" --max-new-tokens 128 --json $config 2>/dev/null |
      python3 -c "
import json, sys
d = json.load(sys.stdin); s = d.get('speculative')
print(json.dumps({'config': sys.argv[1] or 'plain', 'rep': int(sys.argv[2]), 'tokens': len(d['output_ids']), 'tok_s': round(d['decode_tokens_per_second'], 2),
  'tokens_per_step': s and round(s['tokens_per_step'], 3), 'acceptance': s and round(s['acceptance_rate'], 3),
  'steps': s and s['steps'], 'hist': s and s['accepted_histogram'], 'by_pos': s and [round(x, 2) for x in s['acceptance_by_position']],
  'ids_hash': hash(tuple(d['output_ids'])) }))" "$config" "$rep"
  done
done
