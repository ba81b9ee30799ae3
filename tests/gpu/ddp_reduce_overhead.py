"""Two ranks of DDP with torch.compile(mode="reduce-overhead"), observed on every rank, then merged.

    torchrun --nproc_per_node 2 tests/gpu/ddp_reduce_overhead.py OUTDIR [--plant] [--steps N]

Each rank trains a small MLP (DistributedDataParallel, NCCL, one GPU per rank) whose module is
compiled with mode="reduce-overhead" (--compile outer compiles the DDP module instead: torch 2.11
then graph-breaks inside DDP's forward and records no CUDA graph at all), inside `cgviz.observe_torch(path=OUTDIR/"run-{rank}.cgtrace.json")`, so
each rank writes the trace of its own CUDA graph tree. With --plant, rank 1 gets a batch of
another size at one step (the others keep theirs): its tree warms up and records while the
other rank replays. Rank 0 then merges the files into OUTDIR/all.cgtrace.json (and all.html),
prints `cgviz.trace.ranks.divergence` and writes OUTDIR/summary.json.

Exit status 0 when the result is as expected: with --plant, a divergence naming rank 1 at the
planted step's calls; without, no divergence at all. Not collected by pytest (no test_ prefix):
run it on a machine with two GPUs (or, with gloo, two ranks sharing one GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import cgviz
from cgviz.trace.ranks import diagnose_merged, divergence, rank_traces

BATCH, ODD_BATCH, FEATURES, CLASSES = 32, 24, 64, 10


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path, help="where each rank's trace, the merged trace and the summary go")
    parser.add_argument("--plant", action="store_true", help="give rank 1 a batch of another size at one step")
    parser.add_argument("--steps", type=int, default=12, help="training steps (default 12)")
    parser.add_argument("--odd-step", type=int, default=6, help="the step at which --plant changes rank 1's batch")
    parser.add_argument("--compile", choices=("inner", "outer"), default="inner",
                        help="compile the module DDP wraps (inner, default) or the DDP module itself (outer)")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                        help="default: nccl with a GPU per rank; gloo where ranks share a GPU (NCCL refuses that)")
    return parser.parse_args()


def train(compiled: nn.Module, rank: int, args: argparse.Namespace, device: torch.device) -> list[int]:
    opt = torch.optim.SGD(compiled.parameters(), lr=0.01)
    gen = torch.Generator(device="cpu").manual_seed(1234 + rank)
    batches = []
    for step in range(args.steps):
        rows = ODD_BATCH if args.plant and rank == 1 and step == args.odd_step else BATCH
        batches.append(rows)
        x = torch.randn(rows, FEATURES, generator=gen).to(device)
        y = torch.randint(0, CLASSES, (rows,), generator=gen).to(device)
        torch.compiler.cudagraph_mark_step_begin()
        loss = F.cross_entropy(compiled(x), y)
        loss.backward()  # DDP all-reduces the gradients across the ranks here
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.all_reduce(loss.detach().clone())
    torch.cuda.synchronize()
    return batches


def check(args: argparse.Namespace, world: int) -> int:
    files = [args.outdir / f"run-{r}.cgtrace.json" for r in range(world)]
    merged = cgviz.merge(files)
    merged.save(args.outdir / "all.cgtrace.json")
    cgviz.to_html(merged, args.outdir / "all.html")
    found = divergence(merged)
    parts = rank_traces(merged)
    print(f"merged {len(files)} ranks: {len(merged.steps)} steps")
    for r, part in parts.items():
        meta = part.trace.meta
        counts = {k: n for k, n in part.trace.counts().items() if n}
        print(f"  rank {r} on {meta.get('device')}: {counts}")
    print("\n".join(f.text() for f in found) or "no divergence")
    problems = []
    for r, part in parts.items():
        meta = part.trace.meta
        on_cuda = str(meta.get("device", "")).startswith("cuda")
        if meta.get("rank") != r or meta.get("world_size") != world or not on_cuda:
            problems.append(f"rank {r}'s meta lacks its rank, world size or device: {meta}")
        if not part.trace.counts()["execute"]:
            problems.append(f"rank {r} replayed no CUDA graph")
    if args.plant:
        # rank 1's calls of the planted step: a warmup or recording (of a recompiled graph) where rank 0 replayed
        hits = [f for f in found if f.kind == "divergence" and f.numbers.get("decisions", {}).get(1, "execute")
                != "execute"]
        if not hits:
            problems.append("--plant: no divergence names rank 1 warming up, recording or running eagerly")
        elif not any(merged.steps[i].rank == 1 for f in hits for i in f.evidence):
            problems.append("--plant: the divergence's evidence holds no step of rank 1")
    elif found:
        problems.append(f"no batch was planted, yet {len(found)} divergence finding(s)")
    summary = {
        "torch": torch.__version__,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "plant": args.plant, "steps": len(merged.steps),
        "per_rank": {r: {k: n for k, n in p.trace.counts().items() if n} for r, p in parts.items()},
        "findings": [f.text() for f in found], "diagnosis": diagnose_merged(merged).text(),
        "problems": problems,
    }
    (args.outdir / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print("\n".join(f"PROBLEM: {p}" for p in problems) or "as expected")
    return 1 if problems else 0


def main() -> int:
    args = parse()
    if not torch.cuda.is_available():
        print("needs CUDA: run it with torchrun on a machine with two GPUs", file=sys.stderr)
        return 2
    shared = torch.cuda.device_count() < int(os.environ.get("WORLD_SIZE", "1"))
    dist.init_process_group(args.backend or ("gloo" if shared else "nccl"))
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    args.outdir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                          nn.Linear(128, CLASSES)).to(device)
    if args.compile == "inner":  # DDP around the compiled module: its graphs are CUDA graphs
        ddp = DistributedDataParallel(torch.compile(model, mode="reduce-overhead"), device_ids=[local])
    else:  # the compiled DDP module: torch 2.11 does not trace DDP's forward (no CUDA graphs at all)
        ddp = torch.compile(DistributedDataParallel(model, device_ids=[local]), mode="reduce-overhead")
    status = 0
    try:
        with cgviz.observe_torch(path=args.outdir / "run-{rank}.cgtrace.json"):
            batches = train(ddp, rank, args, device)
        from torch._dynamo.utils import counters

        print(f"rank {rank}: batches {batches}; torch's cudagraph skips: {dict(counters['inductor'])}")
        dist.barrier()
        if rank == 0:
            status = check(args, world)
        flag = torch.tensor([status], device=device)
        dist.broadcast(flag, 0)
        status = int(flag.item())
    finally:
        dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
