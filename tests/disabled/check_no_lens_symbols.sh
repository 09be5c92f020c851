#!/usr/bin/env bash
# Fails when an object compiled with LENS_DISABLED needs any symbol from lens (undefined symbols that name
# the lens namespace).
set -euo pipefail
nm_tool=${NM:-nm}
status=0
for object in "$@"; do
  needed=$("$nm_tool" --undefined-only -C "$object" | grep -E 'lens::' || true)
  if [ -n "$needed" ]; then
    echo "FAIL: $object references lens symbols:" >&2
    echo "$needed" >&2
    status=1
  else
    echo "ok: $object references no lens symbol"
  fi
done
exit $status
