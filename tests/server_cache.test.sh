#!/usr/bin/env bash
# server_cache.test.sh — `nextn serve` on the bundled tiny qwen35 MTP model, driven with curl:
#   - prefix reuse: a second request sharing a long prefix with the first lands in the same slot,
#     reports timings.cache_n > 0 and a smaller prompt_n, and answers exactly what a FRESH server
#     (and `nextn run`) answers for that prompt (--ctx-checkpoint-interval 16);
#   - per-request speculation: speculative.n_max 0 -> draft_n 0 (same text); a drafter not
#     loaded -> 400 naming the allowed values;
#   - logprobs (chat and completions shapes), equal with speculation on and off;
#   - /metrics counters equal the sums of the responses' timings.
# Needs curl and jq (skipped without them). Bounded: every request has a timeout.
set -u
. "$(dirname "$0")/serve_lib.sh"
nx_test_setup server-cache

command -v curl >/dev/null && command -v jq >/dev/null || skip "curl or jq not installed"
[ -f "$model" ] || { fail "$model missing"; echo "0 passed, 1 failed"; exit 1; }

flags=(-m "$model" -np 2 -c 2048 -t 1 -ub 32 --spec-type mtp --draft-max 4 --draft-adaptive off --ctx-checkpoint-interval 16)
post() {   # post PATH BODY OUT
    curl -s -m 60 -o "$3" -w '%{http_code}' "$url$1" -H 'Content-Type: application/json' -d "$2"
}

# A long prompt (~330 tokens) and a second one that extends it.
p1=""
for i in $(seq 0 23); do p1+="def f_$i(x):"$'\n'"    return x * $i + $((3 * i + 1))"$'\n\n'; done
p2="${p1}def g(y):"$'\n'"    return"

nx_serve_start "$work" 200 "${flags[@]}"
url1=$url
pid1=$pid

# ---- prefix reuse ----
b1=$(jq -cn --arg p "$p1" '{prompt: $p, n_predict: 8, temperature: 0}')
b2=$(jq -cn --arg p "$p2" '{prompt: $p, max_tokens: 16, temperature: 0}')
c1=$(post /completion "$b1" "$work/r1.json")
c2=$(post /completion "$b2" "$work/r2.json")
check "two requests answered" "$([ "$c1$c2" = 200200 ] && echo true)" "$c1 $c2"
read -r s1 n1 <<<"$(jq -r '"\(.id_slot) \(.tokens_evaluated)"' "$work/r1.json" 2>/dev/null)"
read -r s2 n2 cn pn <<<"$(jq -r '"\(.id_slot) \(.tokens_evaluated) \(.timings.cache_n) \(.timings.prompt_n)"' "$work/r2.json" 2>/dev/null)"
echo "  first prompt $n1 tokens; second $n2 tokens: cache_n $cn, prompt_n $pn"
check "the second request lands in the first one's slot" "$([ -n "${s1:-}" ] && [ "$s1" = "${s2:-x}" ] && echo true)" "slots ${s1:-} ${s2:-}"
check "cache_n > 0 and prompt_n = prompt - cache_n < prompt" \
    "$([ "${cn:-0}" -gt 0 ] && [ "$((cn + pn))" = "$n2" ] && [ "$pn" -lt "$n2" ] && echo true)" "cache_n ${cn:-} prompt_n ${pn:-} prompt ${n2:-}"
slots=$(curl -s -m 10 "$url/slots")
check "/slots shows the cached tokens" "$(jq -e --argjson n "${n2:-0}" 'map(.n_cached) | max >= $n' <<<"$slots" >/dev/null && echo true)" "$slots"
jq -j '.content' "$work/r2.json" >"$work/reuse.txt"
# OpenAI shape of the same request: usage.prompt_tokens_details.cached_tokens
post /v1/completions "$b2" "$work/r3.json" >/dev/null
check "OpenAI: cached_tokens = timings.cache_n > 0, same text" \
    "$(jq -e '.usage.prompt_tokens_details.cached_tokens == .timings.cache_n and .timings.cache_n > 0' "$work/r3.json" >/dev/null &&
       [ "$(jq -j '.choices[0].text' "$work/r3.json")" = "$(cat "$work/reuse.txt")" ] && echo true)"
# the same request without the cache
b2nc=$(jq -cn --arg p "$p2" '{prompt: $p, max_tokens: 16, temperature: 0, cache_prompt: false}')
post /v1/completions "$b2nc" "$work/r2nc.json" >/dev/null
check "cache_prompt false: cache_n 0, same text" \
    "$([ "$(jq '.timings.cache_n' "$work/r2nc.json")" = 0 ] && [ "$(jq -j '.choices[0].text' "$work/r2nc.json")" = "$(cat "$work/reuse.txt")" ] && echo true)"

# ---- per-request speculation ----
c=$(post /v1/completions "$(jq -cn '{prompt: "def fib(n):", max_tokens: 24, temperature: 0}')" "$work/s_on.json")
c0=$(post /v1/completions "$(jq -cn '{prompt: "def fib(n):", max_tokens: 24, temperature: 0, speculative: {n_max: 0}}')" "$work/s_off.json")
check "speculative.n_max 0 -> draft_n 0 (and drafting otherwise)" \
    "$([ "$c$c0" = 200200 ] && [ "$(jq '.timings.draft_n' "$work/s_off.json")" = 0 ] && [ "$(jq '.timings.draft_n' "$work/s_on.json")" -gt 0 ] && echo true)" \
    "$(jq -c '.timings.draft_n' "$work/s_on.json" "$work/s_off.json" | tr '\n' ' ')"
check "speculative.n_max 0: same text" "$([ "$(jq -j '.choices[0].text' "$work/s_on.json")" = "$(jq -j '.choices[0].text' "$work/s_off.json")" ] && echo true)"
c=$(post /completion '{"prompt":"x","speculative.type":"ngram"}' "$work/s_bad.json")
check "speculative.type not loaded -> 400 naming the allowed values" \
    "$([ "$c" = 400 ] && grep -q "allowed: mtp, none" "$work/s_bad.json" && echo true)" "$c $(cat "$work/s_bad.json")"

# ---- logprobs, speculation on and off ----
for mode in on off; do
    sp='{}'
    [ $mode = off ] && sp='{"type":"none"}'
    post /v1/chat/completions "$(jq -cn --argjson sp "$sp" '{messages: [{role: "user", content: "Write a loop"}], max_tokens: 20,
        temperature: 0, logprobs: true, top_logprobs: 3, speculative: $sp}')" "$work/lp_$mode.json" >/dev/null
    post /v1/completions "$(jq -cn --argjson sp "$sp" '{prompt: "import os", max_tokens: 20, temperature: 0, logprobs: 2,
        speculative: $sp}')" "$work/lpc_$mode.json" >/dev/null
done
shape=$(jq -e '.choices[0].logprobs.content as $c | ($c | length) > 0 and all($c[];
        (.token | type) == "string" and (.logprob | type) == "number" and .logprob <= 0 and (.bytes | type) == "array"
        and (.top_logprobs | length) == 3 and .top_logprobs[0].token == .token and .top_logprobs[0].logprob == .logprob
        and all(.top_logprobs[]; (.token | type) == "string" and (.logprob | type) == "number" and (.bytes | type) == "array"))
        and ([$c[].token] | add) == .choices[0].message.content' "$work/lp_on.json" >/dev/null && echo true)
check "chat logprobs well-shaped (greedy token = top entry, tokens spell the message)" "$shape" "$(head -c 400 "$work/lp_on.json")"
shape=$(jq -e '.choices[0].logprobs as $l | ($l.tokens | length) > 0 and ($l.token_logprobs | length) == ($l.tokens | length)
        and ($l.top_logprobs | length) == ($l.tokens | length) and ($l.text_offset | length) == ($l.tokens | length)
        and $l.text_offset[0] == 0 and all($l.top_logprobs[]; (keys | length) >= 1 and (keys | length) <= 2)
        and ($l.tokens | add) == .choices[0].text' "$work/lpc_on.json" >/dev/null && echo true)
check "completions logprobs well-shaped (tokens, token_logprobs, top_logprobs, text_offset)" "$shape" "$(head -c 400 "$work/lpc_on.json")"
same=true
for f in lp lpc; do
    d=$(jq -n --slurpfile a "$work/${f}_on.json" --slurpfile b "$work/${f}_off.json" '
        def vals(x): if x.choices[0].logprobs.content then [x.choices[0].logprobs.content[] | .logprob, (.top_logprobs[] | .logprob)]
                     else x.choices[0].logprobs.token_logprobs end;
        def toks(x): x.choices[0].logprobs.content // x.choices[0].logprobs.tokens | tostring;
        if toks($a[0]) != toks($b[0]) then 1e9 else [vals($a[0]), vals($b[0])] | transpose | map(.[0] - .[1] | fabs) | max end')
    echo "  $f: largest logprob difference spec on/off: $d"
    jq -e -n --argjson d "${d:-1e9}" '$d <= 1e-4' >/dev/null || same=false
done
check "greedy logprobs equal with speculation on and off" "$same"

# ---- /metrics = sums of timings ----
sum_p=0; sum_g=0
for f in r1 r2 r3 r2nc s_on s_off lp_on lp_off lpc_on lpc_off; do
    sum_p=$((sum_p + $(jq '.timings.prompt_n' "$work/$f.json")))
    sum_g=$((sum_g + $(jq '.timings.predicted_n' "$work/$f.json")))
done
m=$(curl -s -m 10 "$url/metrics")
mp=$(sed -n 's/^nextn_prompt_tokens_total //p' <<<"$m")
mg=$(sed -n 's/^nextn_generated_tokens_total //p' <<<"$m")
check "/metrics prompt / generated tokens = sums of timings" "$([ "$mp $mg" = "$sum_p $sum_g" ] && echo true)" "$mp $mg vs $sum_p $sum_g"
hc=$(sed -n 's/^nextn_decode_seconds_count //p' <<<"$m")
hi=$(sed -n 's/^nextn_decode_seconds_bucket{le="+Inf"} //p' <<<"$m")
check "/metrics decode histogram: +Inf bucket = _count = requests" "$([ "$hc" = 10 ] && [ "$hi" = 10 ] && echo true)" "$hc $hi"

# ---- a fresh server answers the second prompt the same ----
kill -TERM $pid1; wait $pid1 2>/dev/null
nx_serve_start "$work" 200 "${flags[@]}"
post /completion "$b2" "$work/fresh.json" >/dev/null
jq -j '.content' "$work/fresh.json" >"$work/fresh.txt"
check "fresh server: cache_n 0" "$([ "$(jq '.timings.cache_n' "$work/fresh.json")" = 0 ] && echo true)"
if cmp -s "$work/reuse.txt" "$work/fresh.txt"; then ok "reused prefix: same text as a fresh server"; else
    fail "reused prefix != fresh server"; echo "  reuse: $(head -c 200 "$work/reuse.txt")"; echo "  fresh: $(head -c 200 "$work/fresh.txt")"; fi
"$NEXTN" run -m "$model" -p "$p2" -n 16 --temp 0 -t 1 >"$work/run.txt" 2>/dev/null
if cmp -s "$work/run.txt" "$work/fresh.txt"; then ok "fresh server == nextn run"; else fail "fresh server != nextn run"; fi
kill -TERM $pid
wait $pid; rc=$?
trap - EXIT
check "SIGTERM: exit 0" "$([ $rc = 0 ] && echo true)" "$rc"
echo "$passed passed, $failed failed"
[ $failed = 0 ]
