#!/usr/bin/env bash
# promtool on deploy/prometheus: the config and rules check clean and the rule
# unit tests pass. Args: the config, then the promtool unit-test files.
set -euo pipefail
promtool=/usr/bin/promtool
if [ ! -x "$promtool" ]; then
  echo "FAIL: $promtool is not installed. Run tools/install-deps.sh (Debian's" \
       "\`prometheus\` package brings promtool)." >&2
  exit 1
fi
config="$1"; shift
# check config also checks the rule files it names.
"$promtool" check config "$config"
for t in "$@"; do
  "$promtool" test rules "$t"
done
echo PASS
