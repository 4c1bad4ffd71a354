"""The ``fixedgraph`` command: generate, bench, doctor."""
from __future__ import annotations

import argparse
import json
import sys


def _sampling(args):
    from fixedgraph.sampling import SamplingParams

    return SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
                          repetition_penalty=args.repetition_penalty, max_tokens=args.max_tokens,
                          seed=args.seed, stop=args.stop or None, ignore_eos=args.ignore_eos)


def _llm(args):
    from fixedgraph.engine import LLM

    return LLM(args.model, backend=args.backend, max_model_len=args.max_model_len,
               prefill_chunk=args.prefill_chunk)


def cmd_generate(args) -> int:
    llm = _llm(args)
    params = _sampling(args)
    last = None
    sys.stdout.write(args.prompt if not args.chat else "")
    for chunk in llm.stream(args.prompt, params, chat=args.chat):
        sys.stdout.write(chunk.text)
        sys.stdout.flush()
        last = chunk
    sys.stdout.write("\n")
    if args.verbose and last and last.output:
        print(f"[{last.output.metrics.summary()}; finish: {last.output.finish_reason}; backend {llm.device.kind}]",
              file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from fixedgraph.sampling import SamplingParams

    llm = _llm(args)
    vocab = llm.config.vocab_size
    import numpy as np

    prompt = np.random.default_rng(0).integers(0, vocab, size=args.prompt_tokens).tolist()
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    llm.generate([prompt], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))  # warm up
    llm.runner.reset_host_stats()
    m = llm.generate([prompt], params)[0].metrics
    host = llm.runner.host_step_stats()  # the host's work per decode step (metadata + launch)
    res = {"model": str(llm.model_path), "backend": llm.device.kind, "prompt_tokens": args.prompt_tokens,
           "new_tokens": args.max_tokens, "ms_per_token": m.tpot_s * 1e3, "tok_per_s": m.tokens_per_s,
           "ttft_ms": m.ttft_s * 1e3, "weight_GB": llm.weight_bytes / 1e9,
           "host_us_per_step_median": host.get("median_us"), "host_us_per_step_p90": host.get("p90_us"),
           "launch_us_median": host.get("launch_median_us"), "host_cpu_us_per_step": host.get("cpu_mean_us")}
    hs = (f", host {res['host_us_per_step_median']:.1f} us/step median (launch call "
          f"{res['launch_us_median']:.1f}; thread CPU {res['host_cpu_us_per_step']:.1f} mean)" if host else "")
    print(json.dumps(res, indent=1) if args.json else
          f"{res['backend']}: {res['ms_per_token']:.3f} ms/token ({res['tok_per_s']:.1f} tok/s), "
          f"TTFT {res['ttft_ms']:.1f} ms, {args.prompt_tokens}-token prompt, {args.max_tokens} new tokens{hs}")
    return 0


def cmd_doctor(args) -> int:
    from fixedgraph.doctor import doctor, format_report

    report = doctor(args.backend)
    print(json.dumps(report, indent=1, default=str) if args.json else format_report(report))
    return 0 if report["smoke_graph"]["ok"] else 1


def cmd_profile(args) -> int:
    from pathlib import Path

    from fixedgraph.profile import chrome_trace, format_table, profile_decode

    llm = _llm(args)
    res = profile_decode(llm, context=args.context, reps=args.reps, copy_gbps=args.copy_gbps)
    print(format_table(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
    if args.trace:
        Path(args.trace).write_text(chrome_trace(res))
    if args.dot:
        llm.runner.decode_graph(args.context + 1).dot(args.dot)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fixedgraph", description="fixed-address CUDA-graph LLM decode runtime")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def model_args(p):
        p.add_argument("--model", default=None, help="HF model directory or .gguf file (default: SmolLM2-135M-Instruct)")
        p.add_argument("--backend", default=None, choices=["auto", "cuda", "reference"])
        p.add_argument("--max-model-len", type=int, default=None, help="longest prompt + output (tokens)")
        p.add_argument("--prefill-chunk", type=int, default=None,
                       help="tokens per prefill pass (power of two; default 2048 on a GPU, 256 on the reference backend)")

    g = sub.add_parser("generate", help="generate text from a prompt, streaming it")
    g.add_argument("prompt")
    model_args(g)
    g.add_argument("--max-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--stop", action="append", help="a stop string (repeatable)")
    g.add_argument("--ignore-eos", action="store_true")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("-v", "--verbose", action="store_true", help="print timings to stderr")
    g.set_defaults(fn=cmd_generate)

    b = sub.add_parser("bench", help="decode ms/token of one model (see tools/bench.py for peers)")
    model_args(b)
    b.add_argument("--prompt-tokens", type=int, default=128)
    b.add_argument("--max-tokens", type=int, default=512)
    b.add_argument("--json", action="store_true")
    b.set_defaults(fn=cmd_bench)

    pr = sub.add_parser("profile", help="per-kernel time, bytes and bandwidth of one decode step")
    model_args(pr)
    pr.add_argument("--context", type=int, default=128, help="tokens already in the sequence")
    pr.add_argument("--reps", type=int, default=50)
    pr.add_argument("--copy-gbps", type=float, default=None, help="measured copy bandwidth for the floor")
    pr.add_argument("--json", help="write the full profile here")
    pr.add_argument("--trace", help="write a Chrome/Perfetto trace here")
    pr.add_argument("--dot", help="write the decode graph as DOT here")
    pr.set_defaults(fn=cmd_profile)

    d = sub.add_parser("doctor", help="report driver/GPU facts and run a small graph end to end")
    d.add_argument("--backend", default=None, choices=["auto", "cuda", "reference"])
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=cmd_doctor)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from fixedgraph.errors import FixedGraphError

    try:
        return args.fn(args)
    except FixedGraphError as exc:
        print(f"fixedgraph: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
