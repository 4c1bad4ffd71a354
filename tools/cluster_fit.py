#!/usr/bin/env python3
"""How many thread-block clusters of a kernel entry the GPU can hold at once
(cuOccupancyMaxActiveClusters), by cluster size and dynamic shared memory.

    python3 tools/cluster_fit.py                     # runtime_test's cluster_probe, 4/8/16 CTAs
    python3 tools/cluster_fit.py --entry NAME --threads 128 --clusters 8 16 --smem-kb 80 100 140

A cluster's CTAs must all be resident in one GPC at once, so how many clusters fit depends on the
GPU's GPC layout, not only on its SM count. On the H200 (132 SMs; session 37, BENCHMARKS) clusters
of 16 CTAs at one CTA per SM: 7 at once (not 8), at two per SM 14; clusters of 8 at one per SM:
15. A design that wants one cluster per kv head of an 8-kv-head model, 16 CTAs each, therefore
gets either two waves or two CTAs per SM on half the SMs. This prints what the driver says.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    from fixedgraph.backends.cuda import CudaDevice
    from fixedgraph.errors import CudaError
    from fixedgraph.ptx import find_entry

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entry", default="cluster_probe")
    ap.add_argument("--threads", type=int, default=128)
    ap.add_argument("--clusters", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--smem-kb", type=float, nargs="*", default=None,
                    help="dynamic shared memory sizes in KiB (default 0, 100, 140, 200)")
    ap.add_argument("--ctas", type=int, default=0, help="CTAs in the grid (default: 8 clusters)")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    dev = CudaDevice()
    f = dev.function(find_entry(a.entry)[0], a.entry)
    static = dev.drv.function_attributes(f)["shared_bytes"]
    sizes = [int(k * 1024) for k in a.smem_kb] if a.smem_kb else [0, 100 << 10, 140 << 10, 200 << 10]
    dev.drv.function_set_non_portable_cluster(f)
    dev.drv.function_set_max_dynamic_shared(f, max(sizes))
    rows = []
    print(f"{a.entry}: {static} bytes of static shared memory; {dev.properties().get('sm_count', '?')} SMs")
    for C in a.clusters:
        for smem in sizes:
            grid = (a.ctas or 8 * C, 1, 1)
            try:
                n = dev.drv.function_max_active_clusters(f, grid, (a.threads, 1, 1), smem, (C, 1, 1))
            except CudaError as exc:  # the driver rejects the geometry
                n = f"error: {exc.name}"
            rows.append({"cluster": C, "smem": smem, "max_active_clusters": n})
            print(f"cluster {C:2d}  dynamic smem {smem / 1024:6.1f} KiB  max active clusters {n}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
