"""Where the time of one `trace=None` replay call goes, on the GPU: each part of cgviz's replay
path timed alone, beside the whole call and a hand-written copy + replay.

The parts are the same calls the tree makes for `(x * 2 + 1).relu()` on 16 floats in a steady
loop (a root path ended, then replayed): the call's lock, the input signature check (and, apart,
the key and lookup a call pays when that check fails), ending the path (its outputs' liveness),
the replay itself through the CUDA backend (input copy, graph launch, the cached output), and the
node's bookkeeping. Each figure is the minimum over
rounds of the mean over N calls (timeit's way: the least disturbed run), in ns.

Parts timed alone run warm in the CPU's caches; inside a call they run right after CUDA's
launch has evicted them. So the tree's layers are also timed in place (`layers`): each variant
adds one layer of the call to the one below it (the backend's replay, the node's bookkeeping,
the tree's replay path with its liveness test, the call's lock and signature check, the wrapped
function) or one part to a hand-written copy + replay, and all run interleaved in short rounds;
two variants add every check the call makes (the lock, the thread id, the signature, the path's
liveness) to copy + replay at once, through the tree's objects and as flat calls on locals, and
one does that with the stores a call makes (the running thread, the node's replay count, the
current node) in a try/finally: the least a replay path keeping those checks can cost in Python;
each layer's figure is its median excess over copy + replay in the same round, in µs.

Prints one JSON object; `--out PATH` also writes it.

usage: python benchmarks/replay_path.py [--calls N] [--rounds R] [--seconds S] [--out PATH]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import threading
import timeit

import torch
from _stats import copy_and_replay, emit, interleaved, paired, warmed_us


def fn(x: torch.Tensor) -> torch.Tensor:
    return (x * 2 + 1).relu()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=40, help="time for the layers' interleaved rounds")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/replay_path.py needs a CUDA device", file=sys.stderr)
        return 2
    import cgviz
    from cgviz.engine.function import signature_key

    x = torch.randn(16, device="cuda")
    tree = cgviz.Tree("cuda", trace=None)
    f = tree.wrap(fn, name="f")
    for _ in range(5):
        f(x)
    node = tree.nodes[-1]
    variant = next(iter(f.variants.values()))
    backend = tree.backend
    lock = threading.Lock()

    copy_replay, graph = copy_and_replay(fn, x)

    def lock_pair() -> None:
        lock.acquire(False)
        lock.release()

    parts = {
        "whole call, trace=None": lambda: f(x),
        "copy + replay by hand": copy_replay,
        "graph.replay() alone": graph.replay,
        "lock acquire + release": lock_pair,
        "thread id": threading.get_ident,
        "input signature check (the latest call's, in C++)": (
            (lambda: variant.matches(x)) if variant.matches is not None else (lambda: f.variants.get(signature_key((x,))))),
        "signature key + lookup (where that check fails)": lambda: f.variants.get(signature_key((x,))),
        "grad mode": torch.is_grad_enabled,
        "path liveness (outputs dead)": node.path_is_live,
        "backend replay (copy, launch, cached output)": lambda: backend.replay(node.graph, (x,), node.copy_inputs),
        "tree's path end + node bookkeeping": lambda: (tree._end_path(), variant.id in tree.roots),
    }
    ns = {}
    for name, part in parts.items():
        for _ in range(100):
            part()
        torch.cuda.synchronize()
        ns[name] = round(min(timeit.repeat(part, number=args.calls, repeat=args.rounds)) / args.calls * 1e9, 1)
        torch.cuda.synchronize()
    nodes = len(tree.nodes)
    layers = in_place(f, tree, node, variant, x, copy_replay, tree._lock, args.seconds)
    if len(tree.nodes) != nodes or tree.current is not node:
        print("the timed calls changed the tree: a path was found live", file=sys.stderr)
        return 1
    python_parts = [k for k in parts if k not in ("whole call, trace=None", "copy + replay by hand",
                                                    "graph.replay() alone",
                                                    "backend replay (copy, launch, cached output)",
                                                    "signature key + lookup (where that check fails)")]
    result = {
        "benchmark": "replay_path",
        "unit": "ns per call (min over rounds of the mean)",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "calls": args.calls,
        "rounds": args.rounds,
        "ns": ns,
        "whole_minus_copy_replay_ns": round(ns["whole call, trace=None"] - ns["copy + replay by hand"], 1),
        "backend_replay_minus_copy_replay_ns": round(
            ns["backend replay (copy, launch, cached output)"] - ns["copy + replay by hand"], 1),
        "python_parts_sum_ns": round(sum(ns[k] for k in python_parts), 1),
        "layers": layers,
    }
    emit(result, args.out)
    return 0


def in_place(f, tree, node, variant, x, copy_replay, lock, seconds: float) -> dict:
    """Each layer of the call, and each part beside copy + replay, timed where it runs: its
    median excess over copy + replay, paired per round (µs), and the whole call's ratio."""
    from cgviz.engine import _torch_compat as compat

    args = (x,)
    get_ident = threading.get_ident

    def with_part(part):
        def step() -> None:
            part()
            copy_replay()
        return step

    def with_lock() -> None:
        lock.acquire(False)
        get_ident()
        copy_replay()
        lock.release()

    def every_check() -> None:
        lock.acquire(False)
        get_ident()
        if variant.matches is not None:
            variant.matches(x)
        node.path_is_live()
        copy_replay()
        lock.release()

    # the same checks as flat C calls: the cached output's liveness test inline (read through
    # `cached` at each call: a local holding its tensor or storage would keep the path live)
    cached = node.leaves[0].ref
    uses, refs = cached.unheld
    matches = variant.matches or (lambda _x: True)
    getrefcount, use_count = sys.getrefcount, compat.storage_use_count

    def every_check_flat() -> None:
        lock.acquire(False)
        get_ident()
        matches(x)
        getrefcount(cached.tensors[0]) > 2 or getrefcount(cached.storage) > refs or use_count(cached.cdata) > uses
        copy_replay()
        lock.release()

    def least_python_path():
        if not lock.acquire(False):
            raise RuntimeError("the tree's lock is held")
        tree._running_on = get_ident()
        try:
            if not matches(x):
                raise RuntimeError("the signature no longer matches")
            tensors = cached.tensors
            if getrefcount(tensors[0]) > 2 or getrefcount(cached.storage) > refs or use_count(cached.cdata) > uses:
                raise RuntimeError("the path is live")
            copy_replay()
            node.replays += 1
            tree.current = node
            tree.state = "execution"
            return tensors[0]
        finally:
            tree._running_on = None
            lock.release()

    steps = {
        "copy + replay by hand": copy_replay,
        "+ every check (lock, thread id, signature, path liveness)": every_check,
        "+ every check, flat (C calls on locals, no method of the tree)": every_check_flat,
        "the least Python path: flat checks, the call's stores, try/finally": least_python_path,
        "+ signature check": with_part(lambda: variant.matches(x) if variant.matches else None),
        "+ lock and thread id": with_lock,
        "+ path liveness (outputs dead)": with_part(node.path_is_live),
        "backend replay": lambda: tree.backend.replay(node.graph, args, node.copy_inputs),
        "+ node bookkeeping (_execute)": lambda: tree._execute(node, args, 0.0),
        "+ replay path (_run: liveness, path end, the loop's shortcut made again)": lambda: tree._run(variant, args, 0.0),
        "+ lock, signature, dispatch (_call)": lambda: tree._call(f, args, {}),
        "whole call, trace=None": lambda: f(x),
    }
    samples = interleaved({name: (lambda step=step: warmed_us(step, 200)) for name, step in steps.items()},
                          5000, seconds)
    floor = samples["copy + replay by hand"]
    return {
        "rounds": len(floor),
        "over_copy_replay_us": {name: paired(v, floor, lambda a, b: a - b)["median"]
                                for name, v in samples.items() if name != "copy + replay by hand"},
        "copy_replay_us": round(statistics.median(floor), 3),
        "whole_vs_copy_replay": {k: v for k, v in paired(samples["whole call, trace=None"], floor).items()
                                 if k != "per_round"},
    }


if __name__ == "__main__":
    sys.exit(main())
