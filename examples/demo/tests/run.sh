#!/usr/bin/env bash
# Runs every case of tests/NAME.cases (`input|expected`, one per line) through NAME.sh.
set -uo pipefail
cd "$(dirname "$0")/.."

passed=0
failed=0
for cases in tests/*.cases; do
  tool=$(basename "$cases" .cases)
  while IFS='|' read -r input expected; do
    [[ -z "$input" || "$input" == \#* ]] && continue
    got=$(printf '%s\n' "$input" | bash "$tool.sh")
    if [[ "$got" == "$expected" ]]; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
      echo "FAIL $tool: '$input' gave '$got', expected '$expected'"
    fi
  done < "$cases"
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
