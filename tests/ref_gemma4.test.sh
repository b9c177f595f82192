#!/bin/bash
# ref_gemma4.test.sh — runs the numpy gemma4 + gemma4-assistant reference (tests/ref/gemma4.py)
# against shared/golden/gemma4-tiny and gemma4-tiny-centroid, plus its self-checks (SWA ring, MoE,
# no PLE, increment draft positions, masked head, ik dialect, bad input, CLI).
# Promises: skips cleanly (exit 0) without Debian's numpy or the goldens; ends with
# "N passed, N failed". Never touches build outputs or the source tree. ~15-25 s on one core.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
shared="${NX_SHARED_DIR:-/work/shared}"
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1   # never write __pycache__ into the source tree
if ! [ -x "$py" ] || ! "$py" -c "import numpy" 2>/dev/null; then
  echo "SKIP: $py has no numpy (apt-get install python3-numpy)"; echo "0 passed, 0 failed"; exit 0
fi
if [ ! -d "$shared/golden/gemma4-tiny" ]; then
  echo "SKIP: $shared/golden/gemma4-tiny missing"; echo "0 passed, 0 failed"; exit 0
fi
out=$(mktemp); trap 'rm -f "$out"' EXIT
NX_SHARED_DIR="$shared" "$py" "$here/ref/check_golden_gemma4.py" "$shared/golden" >"$out" 2>&1; rc=$?
grep -v -E '^[0-9]+ passed, [0-9]+ failed$' "$out"
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)
if [ -z "$line" ]; then
  echo "FAIL: check_golden_gemma4.py produced no summary (rc $rc)"; echo "0 passed, 1 failed"; exit 1
fi
p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "FAIL: check_golden_gemma4.py exited $rc"; f=1; fi
echo "$p passed, $f failed"
[ "$f" -eq 0 ]
