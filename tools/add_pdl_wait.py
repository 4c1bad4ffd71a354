#!/usr/bin/env python3
"""Insert FG_PDL_WAIT() as the first statement of every kernel entry in the given .cu files
(idempotent). Every kernel must wait before its first global read; see ptx/src/pdl.cuh."""
import re
import sys
from pathlib import Path

for name in sys.argv[1:]:
    p = Path(name)
    s = p.read_text()
    if '#include "pdl.cuh"' not in s:
        last = list(re.finditer(r'^#include .*$', s, re.M))[-1]
        s = s[: last.end()] + '\n#include "pdl.cuh"' + s[last.end():]
    out, pos = [], 0
    for m in re.finditer(r'extern "C" __global__', s):
        brace = s.index("{", m.end())
        body_start = brace + 1
        if "FG_PDL_WAIT()" in s[body_start : body_start + 80]:
            continue
        out.append(s[pos:body_start])
        out.append("\n    FG_PDL_WAIT();  /* PDL: wait for the predecessor grid before any global read */")
        pos = body_start
    out.append(s[pos:])
    p.write_text("".join(out))
    print(p, "done")
