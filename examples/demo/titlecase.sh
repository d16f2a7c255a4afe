#!/usr/bin/env bash
# titlecase: capitalise every word of each line of standard input.
set -euo pipefail

while IFS= read -r line || [[ -n "$line" ]]; do
  read -ra words <<< "$line"
  out=""
  for word in "${words[@]}"; do
    out+="${out:+ }${word^}"
  done
  printf '%s\n' "$out"
done
