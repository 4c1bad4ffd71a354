#!/usr/bin/env bash
# Everything the GPU machine must do, in one call: build in place, run tests/gpu, run them again
# under compute-sanitizer memcheck, run the benchmarks. Logs and JSON go under $OUT; a short
# table is printed last.
#
#   bash tools/gpu_check.sh [stage ...]     stages: build tests memcheck runtime kernels model ab long agree prefill
#                                            host timeline ncu all (default all; long, agree, prefill, host, timeline,
#                                            ncu only when named)
#
# ab: the batch-1 bench (no peers) of every baseline tree in .ab/NAME/ (e.g. `git archive main |
# tar -x -C .ab/base`; carry ".ab") and of this tree, alternated AB_ROUNDS times (default 2) in
# the same call, so that a change is judged against its baseline on the same machine and clocks.
# Each round rotates the order of the sides by one (AB_ROTATE=0: the same order every round).
# AB_ENVS="nar:FIXEDGRAPH_GEMV_NARROW=0 s2:FIXEDGRAPH_GEMV_FUSED_SPLIT=2": more sides, each this
# tree with those environment variables (NAME:VAR=VAL[,VAR=VAL...]; no .ab needed for them).
# AB_PROFILE=1: the first round also profiles each side (tables in ab_NAME_1.log). Each side's
# bench is cut at AB_TIMEOUT seconds (240) and the kernels stage at KERNELS_TIMEOUT (300), so a
# hung candidate (e.g. a flag handoff that never publishes) costs its stage, not the call.
# AB_ARGS2="--models qwen3-0.6b --prompt 32768 --new 128": a second bench.py run per side and
# round (ab2_NAME_R.json). AB_KERNELS="--only attention" (bench_kernels.py arguments): each round also runs the kernel
# bench in every side (abk_NAME_ROUND.log/.json), e.g. for long-context attention.
# long: the model bench at LONG_PROMPTS (default "4096 32768"), LONG_NEW new tokens (64), with
# LONG_PEERS (torch_graph) and a profile per model (prof_longP/); only when named.
# prefill: time to first token against the prefill pass size: the no-peer bench at PREFILL_PROMPT
# (default 32768) tokens, PREFILL_MODELS, once per --prefill-chunk in PREFILL_CHUNKS (default
# "1024 2048 4096 8192"); only when named.
# timeline: tools/timeline.py (TIMELINE_MODELS, TIMELINE_CONTEXT): when each launch's CTAs became
# resident, passed their PDL wait and exited, per SM, from kernels rebuilt with tracing;
# TIMELINE_ENVS="NAME:VAR=VAL[,...] ..." repeats it under those variables (timeline_NAME/);
# TIMELINE_LIGHT=1: light records (thread 0 only, no entry barrier: the untraced order of work);
# TIMELINE_AB=1: also each .ab side's own timeline (timeline_ab_NAME/; light when that tree's
# tools/timeline.py has --light), so an A/B's sides can be compared CTA by CTA.
# ncu: Nsight Compute stall samples per SASS instruction of the decode kernels as bench_kernels
# launches them (0.6B GEMV shapes; attention at 4k and 32k keys), ranked by tools/ncu_stalls.py
# into ncu_NAME.txt / .json (with ncu_NAME_details.txt: the sections' tables). NCU_CASES picks
# cases by name (default all: attn4k attn32k attn4k_sw stage_cp stage_ld stage_rows stage_padrows
# stage_bulkrows stage_bulkpadrows qkv gate_up o_proj);
# ncu_NAME_source.csv holds every SourceCounters column per SASS instruction (stage_cp / stage_ld:
# contiguous 16-byte cp.async / ld.v4 copies, the sector counts' control).
set -u
# The stages write under a work folder; $OUT receives one archive, results.tgz, refreshed after
# every stage's note, so a call cut at the device's time limit still brings back what finished
# (the device returns at most 8 files, and a run cut short used to leave them all loose).
DEST=${OUT:-/tmp/fixedgraph_out}
mkdir -p "$DEST" && DEST=$(cd "$DEST" && pwd)  # absolute: the script cds to the repository next
OUT=$(mktemp -d /tmp/fixedgraph_work.XXXXXX)
snapshot() { (cd "$OUT" && tar czf "$DEST/.results.tgz.part" . 2>/dev/null && mv -f "$DEST/.results.tgz.part" "$DEST/results.tgz"); }
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
stages=${*:-all}
want() { [[ " $stages " == *" all "* || " $stages " == *" $1 "* ]]; }
summary=()
T0=$(date +%s)
note() { summary+=("[$(( $(date +%s) - T0 ))s] $1"); echo "== $1"; printf '%s\n' "${summary[@]}" > "$OUT/summary.txt"; snapshot; }
# one line per bench JSON (tools/bench.py --json): each model's ms/token, TTFT and boot time
bench_line() {
  python3 -c "import json,sys; print(' '.join(f\"{x['model']} {x['fixedgraph_ms_per_token']:.4f} (ttft {x['fixedgraph_ttft_ms']:.1f} ms, boot {x['boot_s']:.1f} s, host us/step mean {x.get('host_us_per_step', -1):.1f} med {x.get('host_us_per_step_median', -1):.1f} launch {x.get('host_launch_us_median', -1):.1f} cpu {x.get('host_cpu_us_per_step', -1):.1f} probe {x.get('host_probe_ns_median', -1):.0f} ns)\" for x in json.load(open(sys.argv[1]))['models']))" "$1" 2>&1 | tail -1
}

# Packages the GPU machine lacks travel as wheels in .whl/ (see docs/GPU.md).
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
site=${PYTHONPATH#$PWD:}  # the path an .ab side runs with after its own tree
# spec_vars "VAR=VAL[,VAR=VAL...]": the array vars, one VAR=VAL each; a comma starts the next
# variable only where "NAME=" follows it, so a value may hold commas (FIXEDGRAPH_CTX_BUCKETS=128,512)
spec_vars() { mapfile -t vars < <(sed -E 's/,([A-Za-z_][A-Za-z0-9_]*=)/\n\1/g' <<< "$1"); }
# build_side DIR: the Cython extension of an .ab tree, built once per call (log: build_NAME.log)
build_side() {
  [ -f "$OUT/build_${1##*/}.log" ] && ls "$1"/fixedgraph/_driver*.so >/dev/null 2>&1 && return 0
  (cd "$1" && python3 setup.py build_ext --inplace > "$OUT/build_${1##*/}.log" 2>&1)
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
t0=$(date +%s)
if ! python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
note "build ok in $(( $(date +%s) - t0 ))s; $(head -2 "$OUT/gpu.txt" | tail -1)"

if want tests; then
  timeout ${TESTS_TIMEOUT:-400} python3 -m pytest tests/gpu -q -rs -p no:cacheprovider --junitxml="$OUT/gpu_tests.xml" \
    ${TESTS_K:+-k "$TESTS_K"} > "$OUT/gpu_tests.log" 2>&1
  note "tests/gpu: $(tail -1 "$OUT/gpu_tests.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -20
fi
if want memcheck; then
  timeout 420 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
    python3 -m pytest tests/gpu -q -p no:cacheprovider -k "not fault and not model and not bad_ptx" > "$OUT/memcheck.log" 2>&1
  rc=$?
  note "memcheck rc=$rc: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) / $(grep -E 'passed|failed' "$OUT/memcheck.log" | tail -1)"
fi
if want runtime; then
  python3 tools/bench_runtime.py --json "$OUT/bench_runtime.json" > "$OUT/bench_runtime.log" 2>&1
  note "bench_runtime rc=$?"
  cat "$OUT/bench_runtime.log"
fi
if want kernels; then
  timeout ${KERNELS_TIMEOUT:-300} python3 tools/bench_kernels.py --json "$OUT/bench_kernels.json" ${KERNELS_ARGS:-} > "$OUT/bench_kernels.log" 2>&1
  note "bench_kernels rc=$?"
  cat "$OUT/bench_kernels.log" | tail -30
fi
if want model && [ -f tools/bench.py ]; then
  mkdir -p "$OUT/prof"
  python3 tools/bench.py --json "$OUT/bench_model.json" --profile-dir "$OUT/prof" ${BENCH_ARGS:-} > "$OUT/bench_model.log" 2>&1
  note "bench model rc=$?"
  grep -v '^ ' "$OUT/bench_model.log" | grep -v '^[{}]' | tail -60
fi
if want ab && { ls -d .ab/*/ >/dev/null 2>&1 || [ -n "${AB_ENVS:-}" ]; }; then
  sides=()
  for d in .ab/*/; do
    [ -d "$d" ] || continue
    d=${d%/}
    if build_side "$d"; then sides+=("$d")
    else tail -20 "$OUT/build_${d##*/}.log"; echo "BUILD FAILED: $d"; fi
  done
  # AB_ENVS="NAME:VAR=VAL[,VAR=VAL...] ...": sides that are this tree run with those variables
  # (a value may hold commas: the next variable starts at ",NAME=")
  # (knob A/Bs without a tree copy each)
  for spec in ${AB_ENVS:-}; do sides+=("env:$spec"); done
  sides+=(.)
  n=${#sides[@]}
  for r in $(seq 1 ${AB_ROUNDS:-2}); do
    # Round r starts at side (r - 1) mod n, so no side always runs last (session 51 saw the last
    # side of a round run ~1% slow on the H200); AB_ROTATE=0 keeps one fixed order.
    order=()
    for ((k = 0; k < n; k++)); do
      if [ "${AB_ROTATE:-1}" = 0 ]; then order+=("${sides[k]}"); else order+=("${sides[(k + r - 1) % n]}"); fi
    done
    for d in "${order[@]}"; do
      vars=()
      if [[ $d == env:* ]]; then
        spec=${d#env:}; name=${spec%%:*}; spec_vars "${spec#*:}"; d=.
      else
        name=${d##*/}; [ "$d" = . ] && name=cand
      fi
      dir=$(cd "$d" && pwd)
      # what ran on this side (tools/ab_prepare.sh wrote it; the device's git may be stale)
      if [ "$d" = . ]; then ref=$(cat .ab/CANDIDATE 2>/dev/null || echo "working tree ${FIXEDGRAPH_COMMIT:-?}"); else ref=$(cat "$d/AB_COMMIT" 2>/dev/null || echo "?"); fi
      [ ${#vars[@]} -gt 0 ] && ref="$ref with ${vars[*]}"
      prof=(); [ -n "${AB_PROFILE:-}" ] && [ "$r" = 1 ] && mkdir -p "$OUT/prof_$name" && prof=(--profile-dir "$OUT/prof_$name")
      (cd "$dir" && env "${vars[@]}" FIXEDGRAPH_COMMIT="${ref#* }" PYTHONPATH="$dir:$site" timeout ${AB_TIMEOUT:-240} \
         python3 tools/bench.py --peers= ${AB_ARGS:-} "${prof[@]}" --json "$OUT/ab_${name}_$r.json" > "$OUT/ab_${name}_$r.log" 2>&1)
      note "ab $name [$ref] round $r rc=$?: $(bench_line "$OUT/ab_${name}_$r.json")"
      if [ -n "${AB_ARGS2:-}" ]; then  # a second bench per side and round (e.g. a long prompt)
        (cd "$dir" && env "${vars[@]}" FIXEDGRAPH_COMMIT="${ref#* }" PYTHONPATH="$dir:$site" timeout ${AB_TIMEOUT:-240} \
           python3 tools/bench.py --peers= $AB_ARGS2 --json "$OUT/ab2_${name}_$r.json" > "$OUT/ab2_${name}_$r.log" 2>&1)
        note "ab2 $name round $r rc=$?: $(bench_line "$OUT/ab2_${name}_$r.json")"
      fi
      if [ -n "${AB_KERNELS:-}" ]; then
        (cd "$dir" && env "${vars[@]}" PYTHONPATH="$dir:$site" python3 tools/bench_kernels.py $AB_KERNELS \
           --json "$OUT/abk_${name}_$r.json" > "$OUT/abk_${name}_$r.log" 2>&1)
        note "ab kernels $name round $r rc=$?: $(grep -E 'attention|gemv' "$OUT/abk_${name}_$r.log" | tail -4 | tr -s ' ' | tr '\n' ';')"
      fi
    done
  done
fi
if [[ " $stages " == *" long "* ]]; then
  # long contexts (only when named): the batch-1 bench at LONG_PROMPTS with a profile (attention's
  # in-graph share at 4k-32k keys) and the static-KV CUDA-graph peer in the same run
  for p in ${LONG_PROMPTS:-4096 32768}; do
    timeout ${LONG_TIMEOUT:-240} python3 tools/bench.py --models ${LONG_MODELS:-qwen3-0.6b,qwen3-8b} --prompt "$p" \
      --new ${LONG_NEW:-64} --peers ${LONG_PEERS:-torch_graph} --profile-dir "$OUT/prof_long$p" \
      --json "$OUT/bench_long$p.json" > "$OUT/bench_long$p.log" 2>&1
    note "bench long $p rc=$?: $(bench_line "$OUT/bench_long$p.json")"
  done
fi
if [[ " $stages " == *" agree "* ]]; then
  # logits after a long prompt against transformers in bf16 and float32 (only when named):
  # tools/long_agree_check.py --fp32 per model in AGREE_MODELS at AGREE_PROMPT tokens
  for m in ${AGREE_MODELS:-qwen3-0.6b qwen3-8b}; do
    timeout ${AGREE_TIMEOUT:-200} python3 tools/long_agree_check.py --models "$m" --prompt ${AGREE_PROMPT:-32768} --fp32 \
      > "$OUT/agree_$m.log" 2>&1
    rc=$?
    line=$(grep '^{' "$OUT/agree_$m.log" | tail -1)
    if [ -n "$line" ]; then
      line=$(echo "$line" | python3 -c "import json,sys; f=json.loads(sys.stdin.read())['fp32']; print(f\"float32 argmax {f['argmax']} (top-2 margin {f['top2_margin']:.3f}); ours {f['ours']['argmax']} rms {f['ours']['rms_diff']:.3f}; transformers-bf16 {f['transformers_bf16']['argmax']} rms {f['transformers_bf16']['rms_diff']:.3f}\")")
    else
      line=$(tail -1 "$OUT/agree_$m.log")
    fi
    note "agree $m rc=$rc: $line"
  done
fi
if [[ " $stages " == *" prefill "* ]]; then
  # TTFT against the prefill pass size (only when named)
  for c in ${PREFILL_CHUNKS:-1024 2048 4096 8192}; do
    timeout ${PREFILL_TIMEOUT:-200} python3 tools/bench.py --models ${PREFILL_MODELS:-qwen3-0.6b,qwen3-8b} \
      --prompt ${PREFILL_PROMPT:-32768} --new 16 --peers= --prefill-chunk "$c" \
      --json "$OUT/prefill_$c.json" > "$OUT/prefill_$c.log" 2>&1
    note "prefill chunk $c rc=$?: $(bench_line "$OUT/prefill_$c.json")"
  done
fi
if [[ " $stages " == *" host "* ]]; then
  # host time per decode step against where the loop's thread runs (only when named): the machine's
  # CPUs / NUMA nodes / the GPU's local CPUs, then the no-peer bench under each
  # FIXEDGRAPH_CPU_AFFINITY in HOST_AFFINITIES (default "off gpu one"; one: a single local CPU),
  # HOST_ROUNDS times (default 2), alternated
  { lscpu; echo; cat /sys/bus/pci/devices/*/local_cpulist 2>/dev/null | sort | uniq -c; nvidia-smi topo -m; } > "$OUT/host_cpus.txt" 2>&1
  # the decode loop's own Python on this machine's CPU (launches stubbed, no GPU): what of the
  # bench's host time per step is not the launch call
  timeout 120 python3 tools/host_step_probe.py --steps 1000 > "$OUT/host_probe.log" 2>&1
  note "host probe rc=$?: $(tail -1 "$OUT/host_probe.log")"
  bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)
  one=$(python3 -c "
import os, sys
from fixedgraph import hostcpu
allowed = set(os.sched_getaffinity(0))
local = hostcpu.gpu_local_cpus(sys.argv[1]) or allowed
print(min((local & allowed) or allowed))" "$bus" 2>/dev/null)
  note "host: GPU $bus, local CPUs $(cat /sys/bus/pci/devices/$(python3 -c "from fixedgraph import hostcpu; import sys; print(hostcpu.sysfs_name(sys.argv[1]))" "$bus")/local_cpulist 2>/dev/null), $(nproc) CPUs, $(lscpu | grep -E '^NUMA node\(s\)' | tr -s ' ')"
  for r in $(seq 1 ${HOST_ROUNDS:-2}); do
    for a in ${HOST_AFFINITIES:-off gpu one}; do
      spec=$a; [ "$a" = one ] && spec=$one
      FIXEDGRAPH_CPU_AFFINITY=$spec timeout 200 python3 tools/bench.py --peers= --models ${HOST_MODELS:-qwen3-0.6b,qwen3-8b} \
        --json "$OUT/host_${a}_$r.json" > "$OUT/host_${a}_$r.log" 2>&1
      note "host $a ($spec) round $r rc=$?: $(python3 -c "
import json, sys
for x in json.load(open(sys.argv[1]))['models']:
    h = x['host_step_us']; c = x.get('machine_cpu_during_decode', {})
    print(f\"{x['model']} {x['fixedgraph_ms_per_token']:.4f} ms host med {h['median_us']:.1f} p90 {h['p90_us']:.1f} launch {h.get('launch_median_us', -1):.1f} cpus {x.get('host_cpus')} thr {x.get('process_threads')} steal {c.get('steal_pct', -1):.1f}%\", end='; ')
" "$OUT/host_${a}_$r.json" 2>&1 | tail -1)"
    done
  done
fi
if [[ " $stages " == *" timeline "* ]]; then
  # per-CTA timeline of one decode replay with the kernels rebuilt traced (only when named)
  light=(); [ -n "${TIMELINE_LIGHT:-}" ] && light=(--light)
  timeout ${TIMELINE_TIMEOUT:-300} python3 tools/timeline.py --models ${TIMELINE_MODELS:-qwen3-0.6b,qwen3-8b} \
    --context ${TIMELINE_CONTEXT:-128} --out "$OUT/timeline" "${light[@]}" > "$OUT/timeline.log" 2>&1
  note "timeline rc=$?"
  grep -v '^ ' "$OUT/timeline.log" | tail -30
  if [ -n "${TIMELINE_AB:-}" ]; then  # each .ab side's own tree, its kernels traced as it builds them
    for d in .ab/*/; do
      [ -d "$d" ] || continue
      d=${d%/}; name=${d##*/}; dir=$(cd "$d" && pwd)
      build_side "$d" || { echo "BUILD FAILED: $d"; continue; }
      lt=(); [ ${#light[@]} -gt 0 ] && grep -q -- "--light" "$d/tools/timeline.py" && lt=(--light)
      (cd "$dir" && PYTHONPATH="$dir:$site" timeout ${TIMELINE_TIMEOUT:-300} python3 tools/timeline.py \
         --models ${TIMELINE_MODELS:-qwen3-0.6b,qwen3-8b} --context ${TIMELINE_CONTEXT:-128} \
         --ptx-dir "/tmp/fixedgraph_ptx_trace_ab_$name" --out "$OUT/timeline_ab_$name" "${lt[@]}" \
         > "$OUT/timeline_ab_$name.log" 2>&1)
      rc=$?  # before the note's own command substitution resets $?
      note "timeline ab $name [$(cat "$d/AB_COMMIT" 2>/dev/null)] ${lt[*]} rc=$rc"
      grep -E '^(qwen|gemv|paged|replay)' "$OUT/timeline_ab_$name.log" | cut -c1-120 | tail -16
      # this tree against the side, per role (o_proj apart from down_proj): timeline_cmp_NAME_MODEL.txt
      for j in "$OUT"/timeline/timeline_*.json; do
        b=$(basename "$j" .json); [[ "$b" != timeline_trace_* ]] || continue
        [ -f "$OUT/timeline_ab_$name/$b.json" ] || continue
        cmp="$OUT/timeline_cmp_${name}_${b#timeline_}.txt"
        python3 tools/timeline_cmp.py "cand=$j" "$name=$OUT/timeline_ab_$name/$b.json" > "$cmp" 2>&1
        tail -n +3 "$cmp" | cut -c1-110
      done
    done
  fi
  # TIMELINE_ENVS="NAME:VAR=VAL[,VAR=VAL...] ...": the same timeline again under those variables
  # (into timeline_NAME/), e.g. a knob's effect on where the CTAs land
  for spec in ${TIMELINE_ENVS:-}; do
    name=${spec%%:*}; spec_vars "${spec#*:}"
    env "${vars[@]}" timeout ${TIMELINE_TIMEOUT:-300} python3 tools/timeline.py --models ${TIMELINE_MODELS:-qwen3-0.6b,qwen3-8b} \
      --context ${TIMELINE_CONTEXT:-128} --out "$OUT/timeline_$name" "${light[@]}" > "$OUT/timeline_$name.log" 2>&1
    note "timeline $name (${vars[*]}) rc=$?"
    grep -v '^ ' "$OUT/timeline_$name.log" | grep -E '^(qwen|gemv|paged|replay)' | cut -c1-120 | tail -16
  done
fi
if [[ " $stages " == *" ncu "* ]]; then
  # name : kernel-name regex : bench_kernels arguments
  cases=("attn4k:^paged_attention_decode_d:--only attention --ctx 4096"
         "attn32k:^paged_attention_decode_d:--only attention --ctx 32768"
         "attn4k_sw:^paged_attention_decode_sw_d:--only attention --ctx 4096 --attn-swap"
         "stage_cp:^stage_probe:--only staging --staging-kb 48 --staging-variant cp.async"
         "stage_ld:^stage_probe:--only staging --staging-kb 48 --staging-variant ld.v4"
         "stage_rows:^stage_probe:--only staging --staging-kb 48 --staging-variant rows"
         "stage_padrows:^stage_probe:--only staging --staging-kb 48 --staging-variant padrows"
         "stage_bulkrows:^stage_probe:--only staging --staging-kb 48 --staging-variant bulkrows"
         "stage_bulkpadrows:^stage_probe:--only staging --staging-kb 48 --staging-variant bulkpadrows"
         "qkv:^gemv_rmsnorm_bf16:--only gemv --gemv-model qwen3-0.6b --gemv-shape 4096x1024"
         "gate_up:^gemv_rmsnorm_silu:--only gemv --gemv-model qwen3-0.6b --gemv-shape 6144x1024"
         "o_proj:^gemv_bf16:--only gemv --gemv-model qwen3-0.6b --gemv-shape 1024x2048")
  for spec in "${cases[@]}"; do
    name=${spec%%:*}; rest=${spec#*:}; kern=${rest%%:*}; args="${rest#*:} --no-read"  # no read floor under ncu
    [[ -n "${NCU_CASES:-}" && " $NCU_CASES " != *" $name "* ]] && continue
    # shellcheck disable=SC2086
    timeout 300 ncu --clock-control none -k "regex:$kern" --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SourceCounters --import-source no \
      -f -o "$OUT/ncu_$name" python3 tools/bench_kernels.py $args > "$OUT/ncu_${name}_run.log" 2>&1
    python3 tools/ncu_stalls.py "$OUT/ncu_$name.ncu-rep" --json "$OUT/ncu_$name.json" > "$OUT/ncu_$name.txt" 2>&1
    # samples; code touched; L2 sectors and shared wavefronts against their ideal
    note "ncu $name rc=$?: $(head -2 "$OUT/ncu_$name.txt" | tr '\n' ' ') $(grep -E '^  (L2 sectors|shared wavefronts)' "$OUT/ncu_$name.txt" | sed 's/, most:$//' | tr '\n' ' ')"
    ncu -i "$OUT/ncu_$name.ncu-rep" --page details > "$OUT/ncu_${name}_details.txt" 2>&1
    # every SourceCounters column per SASS instruction (excess sectors / wavefronts, executions)
    ncu -i "$OUT/ncu_$name.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${name}_source.csv" 2>&1
    rm -f "$OUT/ncu_$name.ncu-rep"
  done
fi
echo
echo "================ summary ================"
printf '%s\n' "${summary[@]}"

# At most 8 files come back from the GPU machine: everything goes back as one archive.
snapshot
rm -rf "$OUT"
