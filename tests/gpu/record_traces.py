"""Record every scenario on the GPU and save the traces (run on a GPU machine).

usage: python tests/gpu/record_traces.py OUTDIR
"""

import sys
from pathlib import Path

from cgviz.scenarios import SCENARIOS, run_scenario

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for name in SCENARIOS:
    run = run_scenario(name, "cuda")
    assert not run.mismatches, run.mismatches
    run.trace.save(out / f"{name}.cgtrace.json")
    print(name, len(run.trace.steps), "steps")
