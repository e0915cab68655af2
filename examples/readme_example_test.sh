#!/usr/bin/env bash
# The README's C++ example must be the lines of quickstart.cc between its
# "[readme-example-begin]" and "[readme-example-end]" markers, less their
# two-space indentation. Usage: readme_example_test.sh <quickstart.cc> <README.md>
set -euo pipefail

source_file="${1:?usage: readme_example_test.sh <quickstart.cc> <README.md>}"
readme="${2:?usage: readme_example_test.sh <quickstart.cc> <README.md>}"

from_source="$(sed -n '/\[readme-example-begin\]/,/\[readme-example-end\]/p' "$source_file" |
  sed '1d;$d' | sed 's/^  //')"
# The first ```cpp block of the README.
from_readme="$(awk '/^```cpp$/ {inside = 1; next} inside && /^```$/ {exit} inside {print}' "$readme")"

[[ -n "$from_source" ]] || { echo "FAIL: no marked example in $source_file" >&2; exit 1; }
if [[ "$from_source" != "$from_readme" ]]; then
  echo "FAIL: the README's C++ example differs from $source_file's marked lines:" >&2
  diff <(echo "$from_source") <(echo "$from_readme") >&2 || true
  exit 1
fi
echo "PASS"
