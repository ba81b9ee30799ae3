"""Launch overhead and input-copy cost on a GPU, as JSON (shipped as cgviz/data/gpu/launch_cost.json).

    python benchmarks/launch_cost.py [-o cgviz/data/gpu/launch_cost.json]
"""

from __future__ import annotations

import argparse
import json
import sys

from cgviz.launch_cost import measure_launch_cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", help="write the JSON here as well as to stdout")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    figures = measure_launch_cost(args.device)
    text = json.dumps(figures, indent=1)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
