#!/usr/bin/env bash
# server_draft.test.sh — `nextn serve` with a draft model (--spec-type draft -md F, issue #16) on
# generated pairs (a qwen35 target drafted by a smaller random qwen35, by itself, and a gemma4 target
# drafted by that qwen35; a llama target drafted by a smaller llama, and the qwen35 drafted by it): greedy /completion (llama.cpp's native endpoint, return_tokens) from 3
# concurrent clients on -np 2 gives the same tokens and text as the same server without a draft
# model; the timings and /v1/models name the draft drafter; drafted by itself, every draft is
# accepted. Needs curl and jq (skipped without them). Bounded: every request has a timeout.
set -u
. "$(dirname "$0")/serve_lib.sh"
nx_test_setup server-draft
command -v curl >/dev/null && command -v jq >/dev/null || skip "curl or jq not installed"

gen() { "$NEXTN" gen-model --arch "$1" --out "$work/$2" --seed "$3" ${4:+--config-json "$4"} >/dev/null 2>&1 || fail "gen $2"; }
gen qwen35 q.gguf 7
gen qwen35 q2.gguf 11 '{"n_layer":2}'
gen gemma4 g.gguf 7
gen llama l.gguf 7 '{"n_embd":64,"n_layer":2,"n_head":4,"n_head_kv":2,"n_ff":128,"tied_embeddings":true}'
gen llama l2.gguf 17 '{"n_embd":32,"n_layer":1,"n_head":2,"n_head_kv":1,"n_ff":64,"tied_embeddings":true,"emb_std":0.5}'

prompts=("hello world, hello world" "def fib(n):" "the quick brown fox")

# ask NAME: the 3 prompts concurrently to /completion, 32 greedy tokens each (ignore_eos), into $work/NAME.$i.json
ask() {
    for i in 0 1 2; do
        body=$(jq -cn --arg p "${prompts[$i]}" '{prompt: $p, n_predict: 32, temperature: 0, return_tokens: true, ignore_eos: true}')
        curl -s -m 60 "$url/completion" -H 'Content-Type: application/json' -d "$body" >"$work/$1.$i.json" &
    done
    for j in $(jobs -p); do [ "$j" = "$pid" ] || wait "$j"; done
}

stop() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }

for pair in "q q2" "q q" "g q2" "l l2" "q l2"; do
    set -- $pair
    t=$1 d=$2
    nx_serve_start "$work" 200 -m "$work/$t.gguf" -np 2 -c 512 -t 1 --spec-type none
    ask "off.$t"
    stop
    nx_serve_start "$work" 200 -m "$work/$t.gguf" -np 2 -c 512 -t 1 --spec-type draft -md "$work/$d.gguf" \
        --draft-max 4 --draft-adaptive off
    ask "on.$t.$d"
    models=$(curl -s -m 10 "$url/v1/models")
    stop
    same=true drafted=0 accepted=0
    for i in 0 1 2; do
        a=$(jq -c '[.tokens, .content, .tokens_predicted]' "$work/off.$t.$i.json" 2>/dev/null)
        b=$(jq -c '[.tokens, .content, .tokens_predicted]' "$work/on.$t.$d.$i.json" 2>/dev/null)
        if [ -z "$a" ] || [ "$a" != "$b" ] || [ "$(jq '.tokens | length' "$work/off.$t.$i.json")" != 32 ]; then
            same=false
            echo "  prompt $i: off $a"
            echo "  prompt $i: on  $b"
        fi
        drafted=$((drafted + $(jq '[.timings.drafters[]? | select(.type == "draft") | .draft_n] | add // 0' "$work/on.$t.$d.$i.json")))
        accepted=$((accepted + $(jq '.timings.draft_n_accepted // 0' "$work/on.$t.$d.$i.json")))
    done
    check "$t.gguf drafted by $d.gguf: 3 greedy /completion answers identical to no draft model" "$same"
    check "$t.gguf drafted by $d.gguf: the draft drafter ran ($drafted drafted, $accepted accepted)" \
        "$([ "$drafted" -gt 0 ] && echo true || echo false)"
    check "$t.gguf drafted by $d.gguf: /v1/models lists the draft drafter" \
        "$(jq -e '.data[0].meta.drafters == ["draft"]' <<<"$models" 2>/dev/null)" "$(head -c 300 <<<"$models")"
    if [ "$t" = "$d" ]; then
        check "drafted by itself: every draft accepted" "$([ "$accepted" = "$drafted" ] && echo true || echo false)" \
            "$accepted of $drafted"
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
