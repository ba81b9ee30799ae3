"""The `cgviz` command: demo a scenario, report versions and backends."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

SCENARIO_DEFAULT = "branching"


def _demo(args: argparse.Namespace) -> int:
    from cgviz.scenarios import SCENARIOS, run_scenario

    if args.scenario not in SCENARIOS:
        print(f"cgviz demo: unknown scenario {args.scenario!r}; choose from {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    scenario = SCENARIOS[args.scenario]
    print(f"cgviz demo · {scenario.title} · backend {args.backend}", flush=True)
    print(scenario.description)
    run = run_scenario(args.scenario, device=args.backend)
    print()
    print("steps:")
    for step in run.trace.steps:
        print(f"  {step.index:>3}  {step.headline()}")
        print(f"       why: {step.reason}")
    print()
    print(run.tree.explain())
    if run.mismatches:
        print("results that differ from eager:", *run.mismatches, sep="\n  ", file=sys.stderr)
        return 1
    print(f"\nall results equal eager ({run.trace.calls} decisions)")
    if args.output:
        run.trace.save(args.output)
        print(f"trace saved to {args.output}")
    return 0


def _info(args: argparse.Namespace) -> int:
    import platform

    import torch

    import cgviz
    from cgviz.engine import _torch_compat

    print(f"cgviz {cgviz.__version__}")
    print(f"python {platform.python_version()} · torch {torch.__version__}")
    cuda = torch.cuda.is_available()
    print("backends:")
    print("  sim   available (CPU simulation)")
    if cuda:
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        print(f"  cuda  available: {torch.cuda.device_count()} device(s): {names}")
    else:
        built = "without CUDA" if torch.version.cuda is None else f"with CUDA {torch.version.cuda}, but no device"
        print(f"  cuda  unavailable (torch built {built})")
    print("private torch functions used by the cuda backend:")
    for need, found in _torch_compat.FOUND.items():
        print(f"  {need:<38} {found or 'missing'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from cgviz.scenarios import SCENARIOS

    parser = argparse.ArgumentParser(prog="cgviz", description="Run and inspect CUDA graph trees.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a scenario and show its tree, steps and reasons")
    demo.add_argument("--backend", choices=("auto", "sim", "cuda"), default="auto")
    demo.add_argument("--scenario", default=SCENARIO_DEFAULT, help=f"one of: {', '.join(SCENARIOS)}")
    demo.add_argument("--text", action="store_true", help="print the tree and steps in the terminal")
    demo.add_argument("-o", "--output", help="also save the trace as JSON to this path")
    demo.set_defaults(run=_demo)
    info = sub.add_parser("info", help="versions, backends, and the private torch functions found")
    info.set_defaults(run=_info)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except RuntimeError as exc:  # e.g. --backend cuda without CUDA
        print(f"cgviz {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
