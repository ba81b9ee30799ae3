import gc, sys, torch
from cgviz.scenarios import SCENARIOS, run_scenario
names = sys.argv[1:] or list(SCENARIOS)
for name in names:
    print("run", name, flush=True)
    r = run_scenario(name, "cuda")
    print(" ok", r.mismatches, flush=True)
    del r
    gc.collect()
    print(" collected", flush=True)
    torch.cuda.synchronize()
