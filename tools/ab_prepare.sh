#!/usr/bin/env bash
# Baseline trees for `tools/gpu_check.sh ab`: one .ab/NAME per argument, NAME=REF or just REF
# (a branch, tag or commit; NAME defaults to the ref with '/' made '_'), exported with
# `git archive` (committed files only: the PTX is the committed one). Optional edits after the
# export (e.g. a constant changed for an A/B) go into .ab/NAME by hand. Replaces .ab entirely
# (AB_DIR: another folder, for tests). Each tree gets AB_COMMIT ("REF SHA") and the folder a
# CANDIDATE file (this checkout's branch and commit, "+changes" when the working tree differs),
# so gpu_check's ab notes and JSON name what ran on each side (the device's git is not this one).
# Each exported tree's committed PTX is checked against its sources (tools/build_ptx.py --check,
# ~15 s a tree; AB_NO_PTX_CHECK=1 skips it): a stale one stops the script.
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
  # The device runs the committed PTX: a ref whose ptx/*.ptx lags its ptx/src runs the old
  # kernels under the new name (session 22 lost a side so). AB_NO_PTX_CHECK=1 skips (no nvcc).
  if [ -z "${AB_NO_PTX_CHECK:-}" ] && ! (cd "$ab/$name" && python3 tools/build_ptx.py --check >/dev/null 2>&1); then
    echo "STALE PTX in $ab/$name: its committed ptx/*.ptx differ from a rebuild of ptx/src" >&2
    echo "  (rebuild there with python3 tools/build_ptx.py, or commit the rebuilt PTX on $ref)" >&2
    exit 3
  fi
done
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo "+changes" || true)
echo "$(git rev-parse --abbrev-ref HEAD) $(git rev-parse --short HEAD)$dirty" > "$ab/CANDIDATE"
echo "candidate: $(cat "$ab/CANDIDATE") (this checkout)"
du -sh "$ab" | cut -f1 | sed 's/^/total /'
