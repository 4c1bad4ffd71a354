#!/usr/bin/env python3
"""How many thread-block clusters of a kernel entry the GPU can hold at once
(cuOccupancyMaxActiveClusters), by cluster size and dynamic shared memory.

    python3 tools/cluster_fit.py                                    # the clustered norm + qkv +
                                                                    # attention entry at its sizes
    python3 tools/cluster_fit.py --entry decode_qkv_attention_d64 --clusters 8 16 --smem-kb 80 100 140

A launch of the clustered decode attention needs Hkv clusters resident at once (one per kv head):
a cluster of 16 CTAs at one CTA per SM needs 16 free SMs of one GPC, which not every GPC of a
132-SM H100/H200 has, so the planner keeps a CTA's shared memory low enough for two per SM
(fixedgraph.ops.attention.QKV_ATTN_SMEM_BUDGET). This prints what the driver says.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    from fixedgraph.backends.cuda import CudaDevice
    from fixedgraph.ops import attention
    from fixedgraph.ptx import find_entry

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entry", default="decode_qkv_attention_d128")
    ap.add_argument("--clusters", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--smem-kb", type=float, nargs="*", default=None,
                    help="dynamic shared memory sizes in KiB (default: the launcher's for Qwen3-0.6B's shape, "
                         "and 100, 140, 200)")
    ap.add_argument("--ctas", type=int, default=0, help="CTAs in the grid (default: 8 clusters)")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    dev = CudaDevice()
    f = dev.function(find_entry(a.entry)[0], a.entry)
    static = dev.drv.function_attributes(f)["shared_bytes"]
    sizes = [int(k * 1024) for k in a.smem_kb] if a.smem_kb else (
        [attention.qkv_attention_smem(1024, 16, 8, 128, 16)[0], 100 << 10, 140 << 10, 200 << 10])
    dev.drv.function_set_non_portable_cluster(f)
    dev.drv.function_set_max_dynamic_shared(f, max(sizes))
    rows = []
    print(f"{a.entry}: {static} bytes of static shared memory; {dev.properties().get('sm_count', '?')} SMs")
    for C in a.clusters:
        for smem in sizes:
            grid = (a.ctas or 8 * C, 1, 1)
            try:
                n = dev.drv.function_max_active_clusters(f, grid, (attention.DECODE_THREADS, 1, 1), smem, (C, 1, 1))
            except Exception as exc:  # the driver rejects the geometry
                n = f"error: {exc}"
            rows.append({"cluster": C, "smem": smem, "max_active_clusters": n})
            print(f"cluster {C:2d}  dynamic smem {smem / 1024:6.1f} KiB  max active clusters {n}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
