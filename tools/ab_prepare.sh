#!/usr/bin/env bash
# Baseline trees for `tools/gpu_check.sh ab`: one .ab/NAME per argument, NAME=REF or just REF
# (a branch, tag or commit; NAME defaults to the ref with '/' made '_'), exported with
# `git archive` (committed files only: the PTX is the committed one). Optional edits after the
# export (e.g. a constant changed for an A/B) go into .ab/NAME by hand. Replaces .ab entirely
# (AB_DIR: another folder, for tests).
#
#   bash tools/ab_prepare.sh base=main l2=l2-prefetch      then carry ".ab" in the device call
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 [NAME=]REF ..." >&2; exit 2; }
ab=${AB_DIR:-.ab}
rm -rf "$ab"
for arg in "$@"; do
  if [[ $arg == *=* ]]; then name=${arg%%=*}; ref=${arg#*=}; else ref=$arg; name=${arg//\//_}; fi
  git rev-parse --verify -q "$ref^{commit}" >/dev/null || { echo "not a commit: $ref" >&2; exit 2; }
  mkdir -p "$ab/$name"
  git archive "$ref" | tar -x -C "$ab/$name"
  echo "$ab/$name <- $ref ($(git rev-parse --short "$ref"))"
done
du -sh "$ab" | cut -f1 | sed 's/^/total /'
