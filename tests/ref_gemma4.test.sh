#!/bin/bash
# ref_gemma4.test.sh — runs the numpy gemma4 + gemma4-assistant reference (tests/ref/gemma4.py)
# against tests/data/golden/gemma4-tiny and gemma4-tiny-centroid, plus its self-checks (SWA ring,
# MoE, no PLE, increment draft positions, masked head, ik dialect, bad input, CLI).
# Promises: skips cleanly (exit 0) only without Debian's numpy; missing goldens fail; ends with
# "N passed, N failed". Never touches build outputs or the source tree. ~15-25 s on one core.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
golden="$here/data/golden"
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1   # never write __pycache__ into the source tree
if ! [ -x "$py" ] || ! "$py" -c "import numpy" 2>/dev/null; then
  echo "SKIP: $py has no numpy (apt-get install python3-numpy)"; echo "0 passed, 0 failed"; exit 0
fi
if [ ! -d "$golden/gemma4-tiny" ]; then
  echo "FAIL: $golden/gemma4-tiny missing"; echo "0 passed, 1 failed"; exit 1
fi
out=$(mktemp); trap 'rm -f "$out"' EXIT
"$py" "$here/ref/check_golden_gemma4.py" "$golden" >"$out" 2>&1; rc=$?
grep -v -E '^[0-9]+ passed, [0-9]+ failed$' "$out"
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)
if [ -z "$line" ]; then
  echo "FAIL: check_golden_gemma4.py produced no summary (rc $rc)"; echo "0 passed, 1 failed"; exit 1
fi
p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "FAIL: check_golden_gemma4.py exited $rc"; f=1; fi
echo "$p passed, $f failed"
[ "$f" -eq 0 ]
