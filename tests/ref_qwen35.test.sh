#!/bin/bash
# ref_qwen35.test.sh — runs the numpy qwen35 reference (tests/ref/) against every
# tests/data/golden/qwen35-* case plus its self-consistency checks (MoE, snapshots, batch sizes).
# Promises: skips cleanly (exit 0) only without Debian's numpy; missing goldens fail (they are
# part of the repository); ends with "N passed, N failed". Never touches build outputs. ~20 s on
# one core.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
golden="$here/data/golden"
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1   # never write __pycache__ into the source tree
if ! "$py" -c "import numpy" 2>/dev/null; then
  echo "SKIP: $py has no numpy (apt-get install python3-numpy)"; echo "0 passed, 0 failed"; exit 0
fi
if [ ! -d "$golden" ]; then
  echo "FAIL: $golden missing"; echo "0 passed, 1 failed"; exit 1
fi
out=$(mktemp); trap 'rm -f "$out"' EXIT
pass=0; fail=0
for t in check_golden.py selftest.py; do
  "$py" "$here/ref/$t" "$golden" >"$out" 2>&1; rc=$?
  grep -v -E '^[0-9]+ passed, [0-9]+ failed$' "$out"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)
  if [ -z "$line" ]; then
    echo "FAIL: $t produced no summary (rc $rc)"; fail=$((fail + 1)); continue
  fi
  p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
  pass=$((pass + p)); fail=$((fail + f))
  [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { echo "FAIL: $t exited $rc"; fail=$((fail + 1)); }
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
