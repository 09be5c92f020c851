#!/usr/bin/env bash
# Runs a command that must fail, and fail saying something: it must exit non-zero and its output must contain
# every '|'-separated part of EXPECTED. Used by the setup tests (a missing package, a missing dependency at
# configure time, a promised test label that ran nothing).
#   expect_failure.sh EXPECTED COMMAND [ARGS...]
set -uo pipefail
expected=$1
shift
output=$("$@" 2>&1)
status=$?
if [ $status -eq 0 ]; then
  echo "$output" | tail -20
  echo "FAIL: the command succeeded; it should have failed naming: ${expected//|/, }"
  exit 1
fi
IFS='|' read -ra parts <<<"$expected"
for part in "${parts[@]}"; do
  if ! grep -qF -- "$part" <<<"$output"; then
    echo "$output" | tail -20
    echo "FAIL: the command failed (exit $status) without saying '$part'"
    exit 1
  fi
done
echo "$output" | grep -v "^--" | tail -12
echo "ok: it failed (exit $status), naming: ${expected//|/, }"
