#!/usr/bin/env python3
"""Registers, shared memory and resident CTAs per SM of kernel entries, from the driver.

    python tools/occupancy.py [ENTRY_SUBSTRING ...] [--threads N] [--dyn BYTES]

Loads the committed PTX (the same JIT the runtime uses) and asks the driver for each entry's
register count, static shared memory and cuOccupancyMaxActiveBlocksPerMultiprocessor at the
block size and dynamic shared memory given (the dynamic size is opted in first, as the runtime
does). Needs a GPU.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from cuda.bindings import driver as cu

ROOT = Path(__file__).resolve().parents[1]


def check(res):
    err, *rest = res if isinstance(res, tuple) else (res,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"driver call failed: {err}")
    return rest[0] if len(rest) == 1 else rest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("match", nargs="*", help="substrings of entry names (default: all)")
    ap.add_argument("--threads", type=int, default=128)
    ap.add_argument("--dyn", type=int, default=0, help="dynamic shared memory bytes per CTA")
    args = ap.parse_args()
    try:
        check(cu.cuInit(0))
    except Exception as e:  # no driver library, or no GPU
        print(f"occupancy: no usable CUDA driver or GPU here ({e}); run it on the GPU machine", file=sys.stderr)
        return 2
    dev = check(cu.cuDeviceGet(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    print(f"{'entry':<44} {'regs':>5} {'static smem':>11} {'dyn':>7} {'CTAs/SM':>8}")
    for ptx in sorted((ROOT / "ptx").glob("*.ptx")):
        text = ptx.read_text()
        names = re.findall(r"\.entry\s+(\w+)\(", text)
        names = [n for n in names if not args.match or any(m in n for m in args.match)]
        if not names:
            continue
        mod = check(cu.cuModuleLoadData(text.encode() + b"\0"))
        for n in names:
            f = check(cu.cuModuleGetFunction(mod, n.encode()))
            regs = check(cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, f))
            smem = check(cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f))
            if args.dyn > 48 * 1024:
                check(cu.cuFuncSetAttribute(f, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            args.dyn))
            occ = check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, args.threads, args.dyn))
            print(f"{n:<44} {regs:>5} {smem:>11} {args.dyn:>7} {occ:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
