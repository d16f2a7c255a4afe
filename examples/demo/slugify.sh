#!/usr/bin/env bash
# slugify: turn each line of standard input into a URL slug.
set -euo pipefail

while IFS= read -r line || [[ -n "$line" ]]; do
  printf '%s\n' "$line" | tr '[:upper:]' '[:lower:]' | sed -e 's/[^a-z0-9]/-/g'
done
