"""The GPU benchmark tools keep working: their programs build and run on the reference backend."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_kernels_programs_run():
    out = subprocess.run([sys.executable, str(ROOT / "tools/bench_kernels.py"), "--smoke"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "smoke ok: 43 programs" in out.stdout, out.stdout + out.stderr


def test_bench_kernels_split_candidates_are_accepted():
    """Every k split the kernel bench tries on the real models' shapes is one its launcher accepts
    (the plain launch runs narrower CTAs than the fused ones: session 21's GEMV run stopped at a
    split of 16 for Qwen3-0.6B's o_proj)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import bench_kernels

    from fixedgraph.program import Program, Ref

    for shapes in bench_kernels.GEMV_SHAPES.values():
        for (N, K), kinds in zip(shapes, bench_kernels.GEMV_KINDS):
            for kind in kinds:
                for split in bench_kernels.split_candidates(N, K, kind):
                    bench_kernels.add_gemv(Program("p"), kind, Ref("w"), N, K, split)  # raises if refused


def test_host_step_probe_times_every_step():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = subprocess.run([sys.executable, str(ROOT / "tools/host_step_probe.py"), "--steps", "40"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    import json

    stats = json.loads(out.stdout.splitlines()[0])
    assert stats["steps"] == 39 and 0 < stats["median_us"] <= stats["max_us"]  # token 1 is the prefill's


def test_kernel_list_is_current():
    """docs/KERNELS.md is what tools/list_kernels.py prints (regenerate it after kernel changes)."""
    out = subprocess.run([sys.executable, str(ROOT / "tools/list_kernels.py"), "--markdown"], capture_output=True,
                         text=True, timeout=120)
    listed = [l for l in (ROOT / "docs/KERNELS.md").read_text().splitlines() if l.startswith("- `")]
    assert out.returncode == 0 and listed == out.stdout.splitlines()


def test_check_ptx_reports_sass_sizes():
    """tools/check_ptx.py --sizes assembles every module and prints each entry's SASS size and the
    decode chain's code per layer (needs ptxas and readelf, as .ci/run's check does)."""
    if shutil.which("ptxas") is None or shutil.which("readelf") is None:
        pytest.skip("ptxas or readelf not installed")
    out = subprocess.run([sys.executable, str(ROOT / "tools/check_ptx.py"), "--sizes"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {l.split()[0]: l.split() for l in out.stdout.splitlines() if l.startswith(("gemv_", "paged_"))}
    assert float(rows["gemv_bf16_vec"][2]) > 1 and int(rows["gemv_bf16_vec"][3]) > 0  # KB, registers
    layer = next(l for l in out.stdout.splitlines() if l.startswith("decode layer"))
    assert all(e in layer for e in ("gemv_rmsnorm_bf16_row", "paged_attention_decode_rope_d128", "gemv_bf16_vec"))


def test_ab_prepare_exports_each_ref(tmp_path):
    """tools/ab_prepare.sh exports committed trees for gpu_check's ab stage (needs a git checkout)."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    env = dict(os.environ, AB_DIR=str(tmp_path / "ab"), AB_NO_PTX_CHECK="1")
    out = subprocess.run(["bash", str(ROOT / "tools/ab_prepare.sh"), "base=HEAD"], capture_output=True, text=True,
                         timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "ab/base/tools/gpu_check.sh").exists() and (tmp_path / "ab/base/ptx/gemv.ptx").exists()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    assert (tmp_path / "ab/base/AB_COMMIT").read_text().split() == ["HEAD", head]
    assert (tmp_path / "ab/CANDIDATE").read_text().split()[1].startswith(head)
    bad = subprocess.run(["bash", str(ROOT / "tools/ab_prepare.sh"), "x=no-such-ref"], capture_output=True, text=True,
                         timeout=60, env=env, cwd=ROOT)
    assert bad.returncode == 2 and "not a commit" in bad.stderr


def test_ab_prepare_checks_the_exported_ptx(tmp_path):
    """Without AB_NO_PTX_CHECK, ab_prepare.sh rebuilds each exported tree's PTX and compares it
    with the committed files (HEAD's match: CI's build_ptx --check says so too)."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None or shutil.which("nvcc") is None:
        pytest.skip("needs a git checkout and nvcc")
    env = {k: v for k, v in os.environ.items() if k != "AB_NO_PTX_CHECK"}
    env["AB_DIR"] = str(tmp_path / "ab")
    out = subprocess.run(["bash", str(ROOT / "tools/ab_prepare.sh"), "base=HEAD"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=ROOT)
    assert out.returncode == 0 and "STALE" not in out.stderr, out.stderr
    (tmp_path / "ab/base/ptx/act.ptx").write_text("// edited\n")  # what a stale commit looks like
    check = subprocess.run(["python3", "tools/build_ptx.py", "--check"], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path / "ab/base")
    assert check.returncode != 0


def test_ncu_stalls_ranks_samples_and_names_the_load(tmp_path):
    """tools/ncu_stalls.py on an exported SASS page: the hot instruction, its stall reason, the
    load whose register it waits for, and the samples per phase between barriers."""
    sys.path.insert(0, str(ROOT / "tools"))
    import ncu_stalls

    cols = ["Address", "Source", "Warp Stall Sampling (All Samples)", "stall_long_sb", "stall_barrier",
            "stall_long_sb (Not Issued)", "Instructions Executed", "Thread Instructions Executed"]
    rows = [
        ["0x0", "LDG.E.STRONG.GPU R28, desc[UR10][R30.64]", "1", "0", "0", "0", "8", "256"],
        ["0x10", "IMAD R4, R5, R6, RZ", "2", "0", "0", "0", "8", "256"],
        ["0x20", "IMAD R27, R28, UR4, R27", "90", "85", "0", "80", "8", "256"],
        ["0x30", "BAR.SYNC.DEFER_BLOCKING 0x0", "5", "0", "5", "0", "8", "256"],
        ["0x40", "@P0 BRA 0x80", "40", "0", "40", "0", "0", "0"],
        ["0x50", "EXIT", "2", "0", "0", "0", "8", "256"],
    ]
    text = "\n".join([",".join(f'"{c}"' for c in ["Kernel Name", "k1"])] + [",".join(f'"{c}"' for c in r)
                                                                                for r in [cols] + rows])
    (tmp_path / "k.csv").write_text(text + "\n")
    [k] = ncu_stalls.parse_source_csv(text)
    s = ncu_stalls.summarize(k, top=2)
    assert k["kernel"] == "k1" and s["samples"] == 140 and len(s["hot"]) == 2
    hot = {h["index"]: h for h in s["hot"]}
    assert hot[2]["reason"] == "long_sb" and hot[2]["after"]["index"] == 0  # R28 came from the LDG
    assert hot[4]["reason"] == "barrier" and hot[4]["after"] is None
    assert [p["samples"] for p in s["phases"]] == [98, 42]  # up to the barrier, then up to EXIT
    assert s["touched"] == 5  # the branch never ran (warp-level count; the thread-level one ignored)
    out = subprocess.run([sys.executable, str(ROOT / "tools/ncu_stalls.py"), str(tmp_path / "k.csv"), "--top", "3"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "k1: 140 stall samples" in out.stdout, out.stdout + out.stderr
    assert "code touched: 5 of 6 instructions executed at least once, 0.1 of 0.1 KB" in out.stdout
    empty = tmp_path / "e.csv"
    empty.write_text('"Kernel Name","k1"\n')
    out = subprocess.run([sys.executable, str(ROOT / "tools/ncu_stalls.py"), str(empty)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "SourceCounters" in out.stderr

def test_ncu_stalls_names_the_instructions_beyond_their_ideal_sectors():
    """The SourceCounters' memory columns: totals against their ideal and the instructions that
    move the most beyond it, per execution (session 36's attention copies: 24 sectors against 16)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import ncu_stalls

    cols = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
            "L2 Theoretical Sectors Global", "L2 Theoretical Sectors Global Ideal", "L1 Wavefronts Shared",
            "L1 Wavefronts Shared Ideal"]
    rows = [
        ["0x0", "LDG.E.128 R4, desc[UR4][R2.64]", "3", "10", "160", "160", "0", "0"],
        ["0x10", "LDGSTS.E.BYPASS.128 desc[UR4][R6.64], P0, [R9]", "1", "10", "240", "160", "40", "40"],
        ["0x20", "LDGSTS.E.BYPASS.128 desc[UR4][R8.64], P1, [R9]", "1", "10", "200", "160", "105", "40"],
        ["0x30", "EXIT", "0", "10", "0", "0", "0", "0"],
    ]
    text = "\n".join(",".join(f'"{c}"' for c in r) for r in [["Kernel Name", "k"], cols] + rows)
    [k] = ncu_stalls.parse_source_csv(text)
    l2, smem = ncu_stalls.summarize(k)["excess"]
    assert (l2["what"], l2["actual"], l2["ideal"], l2["instructions_over"]) == ("L2 sectors (global)", 600, 480, 2)
    assert [w["index"] for w in l2["worst"]] == [1, 2]  # most beyond the ideal first
    assert (smem["actual"], smem["ideal"], [w["index"] for w in smem["worst"]]) == (145, 80, [2])
    text_out = ncu_stalls.render(ncu_stalls.summarize(k))
    assert "L2 sectors (global): 600 against an ideal 480 (20.0% excess) from 2 instructions" in text_out
    assert "24.0 / 16.0 an execution" in text_out
    at_ideal = [r[:4] + [r[5], r[5], r[7], r[7]] for r in rows]
    [k] = ncu_stalls.parse_source_csv("\n".join(",".join(f'"{c}"' for c in r) for r in [cols] + at_ideal))
    assert "L2 sectors (global): 480 at their ideal" in ncu_stalls.render(ncu_stalls.summarize(k))


def test_build_ptx_variant_flags(tmp_path):
    """-D builds a macro variant into --out only: never over the committed ptx/."""
    run = lambda *a: subprocess.run([sys.executable, str(ROOT / "tools/build_ptx.py"), *a], capture_output=True,
                                    text=True, timeout=300, cwd=ROOT)
    out = run("act", "-D", "FG_X")
    assert out.returncode != 0 and "--out DIR" in out.stderr
    out = run("act", "--out", str(tmp_path), "--check")
    assert out.returncode != 0 and "does not combine" in out.stderr
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    out = run("act", "-D", "FG_X=1", "--out", str(tmp_path / "v"))
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "v/act.ptx").read_text()
    assert "-DFG_X=1" in text.splitlines()[0] and ".entry" in text
    assert (ROOT / "ptx/act.ptx").read_text().splitlines()[0] != text.splitlines()[0]


def test_decode_margin_check_judges_both_sequences(tmp_path):
    """tools/decode_margin_check.py on the reference backend: both bf16 sequences are judged by the
    float32 model and the JSON says, per sequence, how many picks were float32's argmax."""
    pytest.importorskip("transformers")
    out = tmp_path / "m.json"
    run = subprocess.run([sys.executable, str(ROOT / "tools/decode_margin_check.py"), "--models", "tiny-qwen3",
                          "--prompt", "12", "--new", "6", "--device", "cpu", "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    (r,) = json.loads(out.read_text())
    for name in ("fixedgraph", "hf_bf16"):
        j = r["judged_by_fp32"][name]
        assert j["steps"] == 6 and 0 <= j["fp32_argmax_agrees"] <= 6 and j["max_deficit"] >= 0
    assert set(r["first_diff"]) == {"fixedgraph/hf_bf16", "fixedgraph/hf_fp32", "hf_bf16/hf_fp32"}


def test_sass_phases_charges_code_to_functions():
    """tools/sass_phases.py: instructions of one entry in an nvdisasm -g listing, charged to the
    source line before them and to the function whose definition encloses that line."""
    sys.path.insert(0, str(ROOT / "tools"))
    import sass_phases

    src = ("#pragma once\n"                                          # 1
           "template <int D>\n"                                      # 2
           "__device__ __forceinline__ void mma_16816(float (&d)[4],\n"  # 3
           "                                          int a) {\n"    # 4
           "    d[0] += a;\n"                                        # 5
           "}\n"                                                     # 6
           "__device__ int helper(int x);\n"                         # 7: a declaration
           "extern \"C\" __global__ void __launch_bounds__(128) kern(int *p) {\n"  # 8
           "    if (p) p[0] = 1;\n")                                 # 9
    listing = "\n".join([
        "\t.section .text.other,\"ax\",@progbits",
        ".text.other:",
        "        /*0000*/                   NOP ;",
        "\t.section .text.kern,\"ax\",@progbits",
        ".text.kern:",
        "        /*0000*/                   LDC R1, c[0x0][0x28] ;",
        '\t//## File "/x/y/k.cu", line 9',
        "        /*0010*/                   ISETP.NE.AND P0, PT, R2, RZ, PT ;",
        "        /*0020*/               @P0 STG.E desc[UR4][R2.64], R0 ;",
        '\t//## File "/x/y/k.cu", line 5',
        "        /*0030*/                   FADD R0, R0, R1 ;",
        ".text.next:",
        "        /*0000*/                   EXIT ;",
    ])
    insns = sass_phases.parse_sass(listing, "kern")
    assert insns == [(0, "?", 0), (0x10, "k.cu", 9), (0x20, "k.cu", 9), (0x30, "k.cu", 5)]
    assert sass_phases.function_index(src) == [(3, "mma_16816"), (8, "kern")]
    by_fn, by_line, runs = sass_phases.summarize(insns, {"k.cu": src})
    assert by_fn == {"?": 16, "k.cu:kern": 32, "k.cu:mma_16816": 16}
    assert by_line[("k.cu", 9)] == 32
    assert [r[0] for r in runs] == ["?", "k.cu:kern", "k.cu:mma_16816"]
    with pytest.raises(SystemExit):
        sass_phases.parse_sass(listing, "missing")
    # PDL waits: the entry's ACQBULKs, not another entry's
    waited = listing.replace("/*0020*/               @P0 STG.E desc[UR4][R2.64], R0 ;",
                             "/*0020*/                   ACQBULK ;")
    assert sass_phases.wait_addresses(waited, "kern") == [0x20]
    assert sass_phases.wait_addresses(listing, "kern") == []
    assert sass_phases.wait_addresses(waited.replace("/*0000*/                   NOP ;",
                                                     "/*0000*/                   ACQBULK ;"), "kern") == [0x20]
    assert sass_phases.wait_addresses(waited.replace("/*0030*/                   FADD R0, R0, R1 ;",
                                                     "/*0030*/                   ACQBULK ;"), "kern") == [0x20, 0x30]
    assert sass_phases.wait_addresses(waited, "missing") == []
