#!/usr/bin/env bash
# draft_sample_accept.sh — acceptance with greedy vs sampled drafts at temperature T (issue #16):
# `nextn run` of N tokens at --temp T (the default chain: top-k 40, top-p 0.95, min-p 0.05), seeds
# 1..S on each prompt, fixed draft length K (adaptive off), once with --draft-sample off (the drafter
# proposes its argmax) and once with --draft-sample on (it samples from its own distribution q; the
# target accepts with min(1, p/q)). Drafted / accepted are summed over all runs per drafter and mode.
# Drafters: the MTP head of MODEL, and the draft model DRAFT (-md; default MODEL itself, where sampled
# drafts have q == p and must all be accepted).
#
# Usage: bench/draft_sample_accept.sh [MODEL.gguf] [--draft DRAFT.gguf] [--temp T] [--tokens N]
#                                     [--seeds S] [--kmax K] [--threads T]
# Default MODEL: models/tiny-qwen35-mtp-q8_0.gguf; prompts: models/demo_prompt.py.txt and
# models/heldout.py.txt. Acceptance is measured, never asserted.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
NEXTN=${NEXTN:-$here/build/nextn}
model=$here/models/tiny-qwen35-mtp-q8_0.gguf draft= temp=0.7 tokens=128 seeds=10 k=3 threads=1
while [ $# -gt 0 ]; do
    case $1 in
    --draft) draft=$2; shift 2 ;;
    --temp) temp=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --kmax) k=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -*) echo "draft_sample_accept: unknown flag $1" >&2; exit 2 ;;
    *) model=$1; shift ;;
    esac
done
[ -x "$NEXTN" ] || { echo "draft_sample_accept: build first (make): $NEXTN missing" >&2; exit 1; }
[ -f "$model" ] || { echo "draft_sample_accept: no model $model" >&2; exit 1; }
[ -n "$draft" ] || draft=$model
prompts=("$here/models/demo_prompt.py.txt" "$here/models/heldout.py.txt")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "model: $model; draft model: $draft; --temp $temp, $tokens tokens, seeds 1..$seeds x ${#prompts[@]} prompts," \
     "--draft-max $k --draft-adaptive off, $threads threads"
printf '| drafter | drafts | runs | drafted | accepted | acceptance | per-depth acceptance | tokens/round |\n'
printf '| --- | --- | ---: | ---: | ---: | ---: | --- | ---: |\n'
for drafter in mtp draft; do
    for sample in off on; do
        dflags=(--spec-type "$drafter")
        [ "$drafter" = draft ] && dflags+=(-md "$draft")
        drafted=0 accepted=0 runs=0 rounds=0 gen=0
        : >"$work/depth"
        for p in "${prompts[@]}"; do
            for s in $(seq 1 "$seeds"); do
                "$NEXTN" run -m "$model" -f "$p" -n "$tokens" --temp "$temp" --seed "$s" -t "$threads" "${dflags[@]}" \
                    --draft-max "$k" --draft-adaptive off --draft-sample "$sample" >/dev/null 2>"$work/err" ||
                    { echo "draft_sample_accept: $drafter $sample seed $s failed:"; cat "$work/err"; exit 1; }
                line=$(grep '^speculation: ' "$work/err" | head -1)
                d=$(sed -n 's/.*drafted \([0-9]*\), accepted \([0-9]*\).*/\1/p' <<<"$line")
                a=$(sed -n 's/.*drafted \([0-9]*\), accepted \([0-9]*\).*/\2/p' <<<"$line")
                r=$(sed -n 's/^speculation: \([0-9]*\) rounds.*/\1/p' <<<"$line")
                g=$(sed -n 's/.*generated \([0-9]*\) tokens.*/\1/p' "$work/err" | head -1)
                drafted=$((drafted + ${d:-0})) accepted=$((accepted + ${a:-0})) runs=$((runs + 1))
                rounds=$((rounds + ${r:-0})) gen=$((gen + ${g:-0}))
                # per-depth "depth:rate" pairs of this run (the table gives their mean over runs)
                sed -n 's/^  acceptance by depth: //p' "$work/err" | tr ' ' '\n' >>"$work/depth"
            done
        done
        depth=$(awk -F: '$2 != "-" && $2 != "" {s[$1] += $2; n[$1]++} END {for (d = 1; d <= 16; d++) if (n[d]) printf "%s%d:%.3f", (d > 1 ? " " : ""), d, s[d] / n[d]}' "$work/depth")
        [ "$sample" = on ] && mode=sampled || mode=greedy
        printf '| %s | %s | %d | %d | %d | %.3f | %s | %.2f |\n' "$drafter" "$mode" "$runs" "$drafted" "$accepted" \
            "$(awk -v a="$accepted" -v d="$drafted" 'BEGIN {print (d > 0 ? a / d : 0)}')" "${depth:--}" \
            "$(awk -v g="$gen" -v r="$rounds" 'BEGIN {print (r > 0 ? g / r : 0)}')"
    done
done
