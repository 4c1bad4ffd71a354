#!/usr/bin/env bash
# Baseline trees for `tools/gpu_check.sh ab`: one .ab/NAME per argument, NAME=REF or just REF
# (a branch, tag or commit; NAME defaults to the ref with '/' made '_'), exported with
# `git archive` (committed files only: the PTX is the committed one). Optional edits after the
# export (e.g. a constant changed for an A/B) go into .ab/NAME by hand. Replaces .ab entirely
# (AB_DIR: another folder, for tests). Each tree gets AB_COMMIT ("REF SHA") and the folder a
# CANDIDATE file (this checkout's branch and commit, "+changes" when the working tree differs),
# so gpu_check's ab notes and JSON name what ran on each side (the device's git is not this one).
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
  echo "$ref $(git rev-parse --short "$ref")" > "$ab/$name/AB_COMMIT"
  echo "$ab/$name <- $ref ($(git rev-parse --short "$ref"))"
done
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo "+changes" || true)
echo "$(git rev-parse --abbrev-ref HEAD) $(git rev-parse --short HEAD)$dirty" > "$ab/CANDIDATE"
echo "candidate: $(cat "$ab/CANDIDATE") (this checkout)"
du -sh "$ab" | cut -f1 | sed 's/^/total /'
