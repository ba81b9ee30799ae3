"""What each trace level costs on a real model, on the GPU: torchvision's resnet18.

1. Inference at batch 1, µs per call: eager; a hand-written copy + replay of one CUDA graph;
   torch's own trees (`torch.compile(backend="cudagraphs")`); and `cgviz.Tree("cuda")` at trace
   None, "events" and "full".
2. Training steps (forward, backward, SGD step) of `torch.compile(mode="reduce-overhead")`, ms per
   step, with no observer, under `cgviz.observe_torch` at "events" and "full", and at "events"
   with the observer's replay-loop methods doing nothing (its presence without its work); steady
   state only (the steps are timed after every graph is recorded, and after two steps in each
   observation, which take its first snapshots; the replay-loop events an observer noted are made
   into steps inside the timed chunk). The observer's hooks on torch's classes go in
   at a first observation before any round and stay, passing calls straight on while nothing
   observes (as in any process that has observed once): "no observer" has them. How many calls
   per step pass through them is counted once, after the rounds.

The variants run interleaved in each of R rounds in one process, so drift hits them alike, in an
order that turns by one each round. Training rounds are short (a chunk of steps per variant) and
many, with one garbage collection per round, none inside it: a ratio paired within a round of a
fraction of a second is not moved by the machine's slower drifts. Each figure: the median over
rounds, with quartiles; each ratio: the median of the per-round ratios (a variant against its
baseline in the same round) with their quartiles and the 95 % interval of the median, which say
how sure the ratio is. Training stops starting rounds after --seconds. Prints one JSON object;
`--out PATH` also writes it.

usage: python benchmarks/resnet_levels.py [--calls N] [--rounds R] [--chunk N] [--train-rounds R]
       [--seconds S] [--parts inference,training] [--observed events,full,events_no_work]
       [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import platform
import sys
from functools import partial
from typing import Callable, Iterator, Optional

import torch
from _stats import copy_and_replay, emit, interleaved, per_call_us, rotated, summary, timed_us


def inference_variants(model: torch.nn.Module, x: torch.Tensor) -> dict[str, Callable[[], object]]:
    import cgviz

    out: dict[str, Callable[[], object]] = {"eager": lambda: model(x)}
    out["copy_replay"] = copy_and_replay(model, x, warmups=3)[0]
    trees = torch.compile(model, backend="cudagraphs")
    out["torch_trees"] = lambda: trees(x)
    for level in (None, "events", "full"):
        wrapped = cgviz.Tree("cuda", trace=level).wrap(model, name="resnet18")
        out[f"cgviz_{level}"] = lambda wrapped=wrapped: wrapped(x)
    for step in out.values():  # warm up, record, replay
        for _ in range(5):
            step()
    return out


@contextlib.contextmanager
def events_no_work():
    """The observer at "events", its replay-loop methods doing nothing: a call still goes
    through its wrappers and reaches it, and it notes nothing."""
    from cgviz.observe.torch_compile import start_observing, stop_observing

    observer = start_observing("events")
    observer.watch_call = lambda run, manager, args, kwargs: run(manager, *args, **kwargs)
    observer.replayed = observer.generation_began = observer.path_ended = lambda *args: None
    try:
        yield
    finally:
        stop_observing(observer)


Watching = Callable[[], contextlib.AbstractContextManager]


def caught_up() -> None:
    """The replay-loop events the active observers noted, made into steps now: a long run pays
    this once per few thousand events, a chunk at its end, so that its time counts with the steps."""
    from cgviz.observe import _hooks

    for observer in _hooks.ACTIVE:
        getattr(observer, "catch_up", lambda: None)()


def training_variants(chunk: int, more: Optional[dict[str, Watching]] = None
                      ) -> tuple[dict[str, Callable[[], float]], Callable[[], None], Callable[[int], None]]:
    """Each variant times `chunk` training steps (ms per step) inside its context (`more` adds
    variants); the second value runs the warmups and records, the third takes n steps."""
    import torchvision

    import cgviz

    model = torchvision.models.resnet18(num_classes=10).cuda()
    compiled = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 3, 64, 64, device="cuda")
    y = torch.randint(0, 10, (8,), device="cuda")

    def train(n: int) -> None:
        for _ in range(n):
            torch.compiler.cudagraph_mark_step_begin()
            loss = torch.nn.functional.cross_entropy(compiled(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    def timed(watching: Watching) -> Callable[[], float]:
        def run() -> float:
            """ms per step of `chunk` steps timed inside `watching()` (its start, end and first two
            steps aside), with the events noted meanwhile made into steps; the caller holds the
            garbage collector off."""
            with watching():
                train(2)
                return timed_us(lambda: (train(chunk), caught_up()), 1) / chunk / 1000
        return run

    def warm() -> None:
        with cgviz.observe_torch(trace="events"):  # the hooks go in (once per process)
            pass
        train(6)

    variants = {"no_observer": timed(contextlib.nullcontext),
                "events": timed(partial(cgviz.observe_torch, trace="events")),
                "full": timed(partial(cgviz.observe_torch, trace="full")), "events_no_work": timed(events_no_work)}
    variants |= {name: timed(watching) for name, watching in (more or {}).items()}
    return variants, warm, train


def inference(args: argparse.Namespace, result: dict) -> None:
    import torchvision

    torch.backends.cudnn.benchmark = False
    model = torchvision.models.resnet18().cuda().eval()
    x = torch.randn(1, 3, 224, 224, device="cuda")
    with torch.no_grad():
        runs = inference_variants(model, x)
        samples: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(args.rounds):
            for name in rotated(list(runs), r):
                samples[name].append(per_call_us(runs[name], args.calls))
    result["inference_batch1_us_per_call"] = summary(samples, {
        f"cgviz_{lvl}_vs_copy_replay": (f"cgviz_{lvl}", "copy_replay") for lvl in (None, "events", "full")} | {
        "cgviz_None_vs_torch_trees": ("cgviz_None", "torch_trees"), "eager_vs_copy_replay": ("eager", "copy_replay")})
    result["inference_calls_per_round"] = args.calls


OBSERVED = ("events", "full", "events_no_work")


@contextlib.contextmanager
def hooks_replaced(replace: Callable[[str, Callable], Callable]) -> Iterator[None]:
    """Each of the observer's hooks on torch's manager replaced by `replace(name, hook)` inside the
    block (torch's class assigned to twice per hook). A replacement passes for the hook it
    replaces: an observation started inside the block finds the methods hooked, and wraps none again."""
    from cgviz.observe import _hooks
    from cgviz.observe import _torch_layout as layout

    cls = layout.manager_class()
    hooks = {name: vars(cls)[name] for _, name, _ in _hooks.manager_hooks(cls)}
    for name, hook in hooks.items():
        setattr(cls, name, functools.update_wrapper(replace(name, hook), hook))
    try:
        yield
    finally:
        for name, hook in hooks.items():
            setattr(cls, name, hook)


def hooked_calls_per_step(train: Callable[[int], None], steps: int = 20) -> dict[str, float]:
    """Calls per training step through each of the observer's hooks on torch's manager while
    nothing observes (counted for `steps` steps, after the timed rounds)."""
    counts: dict[str, int] = {}

    def counting(name: str, hook: Callable) -> Callable:
        counts[name] = 0

        def call(*args, **kwargs):
            counts[name] += 1
            return hook(*args, **kwargs)
        return call

    with hooks_replaced(counting):
        train(steps)
    return {name: count / steps for name, count in counts.items() if count}


def training(args: argparse.Namespace, result: dict) -> None:
    trains, warm, train = training_variants(args.chunk)
    trains = {name: run for name, run in trains.items() if name == "no_observer" or name in args.observed}
    warm()
    samples = interleaved(trains, args.train_rounds, args.seconds)
    ratios = {f"{name}_vs_no_observer": (name, "no_observer") for name in OBSERVED if name in trains}
    if "events" in trains and "events_no_work" in trains:
        ratios["events_vs_events_no_work"] = ("events", "events_no_work")
    result["training_ms_per_step"] = summary(samples, ratios)
    result["training_steps_per_round"] = args.chunk
    result["training_rounds"] = len(samples["no_observer"])
    result["training_hooked_calls_per_step"] = hooked_calls_per_step(train)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="inference calls per variant and round")
    parser.add_argument("--rounds", type=int, default=11, help="inference rounds")
    parser.add_argument("--chunk", type=int, default=20, help="training steps per variant and round")
    parser.add_argument("--train-rounds", type=int, default=150)
    parser.add_argument("--seconds", type=float, default=240, help="no training round starts after this")
    parser.add_argument("--parts", default="inference,training")
    parser.add_argument("--observed", default="events,full",
                        help="training variants beside no observer (fewer: more rounds in --seconds)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    if not set(parts) <= {"inference", "training"}:
        parser.error(f"--parts takes inference and/or training, not {args.parts!r}")
    args.observed = args.observed.split(",")
    if not set(args.observed) <= set(OBSERVED):
        parser.error(f"--observed takes some of {', '.join(OBSERVED)}, not {','.join(args.observed)!r}")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
              "rounds": args.rounds}
    if "inference" in parts:
        inference(args, result)
    if "training" in parts:
        training(args, result)
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
