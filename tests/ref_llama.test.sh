#!/bin/bash
# ref_llama.test.sh — nextn's `llama` forward pass against the independent float64 numpy
# reference (tests/ref/llama.py) on generated models: GQA untied; tied with partial RoPE
# (n_rot < head dim), another freq_base and multi-head KV; one KV head with a 100-token prompt;
# Q8_0 weights; an F16 KV cache. Logits and post-norm hidden over the whole prompt (one batch
# through `nextn eval`), max |d| within the tolerance of each case (float32 rounding: 1e-4;
# the engine rounds matmul inputs to Q8_0 for Q8_0 weights, ~5e-2 seen: 0.15; f16 K/V ~1e-3: 1e-2).
# Promises: skips cleanly (exit 0) only without Debian's numpy; ends with "N passed, N failed".
# Needs $NEXTN (set by ctest). A few seconds.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1   # never write __pycache__ into the source tree
nextn="${NEXTN:-$here/../build/nextn}"
if ! "$py" -c "import numpy" 2>/dev/null; then
  echo "SKIP: $py has no numpy (apt-get install python3-numpy)"; echo "0 passed, 0 failed"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
# (the cache is f16 by default: the f32 cases ask for an f32 one)
# name | gen-model config | --type | eval flags | logits tolerance | hidden tolerance | prompt length
cases=(
  'gqa-untied|{"n_embd":64,"n_layer":2,"n_head":4,"n_head_kv":2,"n_ff":128}|f32|-ctk f32 -ctv f32|1e-4|1e-4|48'
  'tied-partial-rope|{"n_embd":96,"n_layer":3,"n_head":3,"n_head_kv":3,"head_dim":32,"n_rot":8,"n_ff":160,"tied_embeddings":true,"rope_freq_base":1e6}|f32|-ctk f32 -ctv f32|1e-4|1e-4|40'
  'mqa-long|{"n_embd":64,"n_layer":2,"n_head":4,"n_head_kv":1,"n_ff":96}|f32|-ctk f32 -ctv f32|1e-4|1e-4|100'
  'q8_0|{"n_embd":64,"n_layer":2,"n_head":4,"n_head_kv":2,"n_ff":128}|q8_0|-ctk f32 -ctv f32|1.5e-1|1.5e-1|48'
  'f16-kv|{"n_embd":64,"n_layer":2,"n_head":4,"n_head_kv":2,"n_ff":128}|f32|-ctk f16 -ctv f16|1e-2|1e-2|48'
)
for c in "${cases[@]}"; do
  IFS='|' read -r name cfg type flags tl th n <<<"$c"
  ids=$(seq 0 $((n - 1)) | awk '{ printf "%s%d", (NR > 1 ? "," : ""), ($1 * 37 + 5) % 512 }')
  m="$tmp/$name.gguf"
  if ! "$nextn" gen-model --arch llama --config-json "$cfg" --type "$type" --seed 3 --out "$m" >/dev/null 2>"$tmp/err" ||
     ! "$nextn" eval -m "$m" --prompt-ids "$ids" $flags --logits-out "$tmp/l.f32" --hidden-out "$tmp/h.f32" \
        >/dev/null 2>>"$tmp/err"; then
    echo "FAIL $name: nextn failed: $(tail -1 "$tmp/err")"; fail=$((fail + 1)); continue
  fi
  out=$("$py" "$here/ref/llama.py" check "$m" --prompt-ids "$ids" --logits "$tmp/l.f32" --hidden "$tmp/h.f32" \
        --tol-logits "$tl" --tol-hidden "$th" 2>&1)
  echo "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$' | sed "s/^/$name: /"
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
  if [ -z "$line" ]; then echo "FAIL $name: no summary"; fail=$((fail + 1)); continue; fi
  p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
  pass=$((pass + p)); fail=$((fail + f))
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
