"""Run the CPU test suite under each torch release cgviz supports, each in its own venv.

    python scripts/test_releases.py [--venvs DIR] [--dry-run] [RELEASE ...]
    (default releases: 2.11.0 2.12.1 2.14.1; make test runs 2.13.0)

`make test` runs the suite under one release (the CPU build of 2.13.0). A test can pass there and
fail under another release because the test itself assumed the installed torch (a method's
signature, a release's rules). This runs `pytest tests` under each release named: a venv per
release in DIR (default `.venv-releases/`, reused on later runs) with that torch from the package
index (CUDA wheels, which import on a CPU: about 5 GB each) and cgviz with its test and browser
extras; then prints one line per release and exits 1 if any failed. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RELEASES = ("2.11.0", "2.12.1", "2.14.1")
RELEASE = re.compile(r"2\.1[1-5]\.\d+")


def commands(release: str, venv: Path) -> list[list[str]]:
    """What sets up `venv` for `release` (skipped where it is set up already) and runs the suite."""
    python = str(venv / "bin" / "python")
    setup = [] if (venv / "bin" / "python").exists() else [[sys.executable, "-m", "venv", str(venv)]]
    return setup + [
        [python, "-m", "pip", "install", "-q", f"torch=={release}"],
        [python, "-m", "pip", "install", "-q", "-e", f"{ROOT}[test,browser]"],
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
    ]


def run(release: str, venv: Path) -> tuple[int, str, float]:
    """(exit status, pytest's last line, seconds) of the suite under `release`."""
    start = time.monotonic()
    *setup, suite = commands(release, venv)
    for command in setup:
        done = subprocess.run(command, cwd=ROOT)
        if done.returncode:
            return done.returncode, f"setup failed: {' '.join(command)}", time.monotonic() - start
    done = subprocess.run(suite, cwd=ROOT, capture_output=True, text=True)
    sys.stdout.write(done.stdout[-4000:])
    lines = done.stdout.strip().splitlines()
    return done.returncode, lines[-1] if lines else done.stderr.strip()[-200:], time.monotonic() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="*", default=list(DEFAULT_RELEASES), metavar="RELEASE",
                        help="torch releases, e.g. 2.12.1 (2.11 to 2.15)")
    parser.add_argument("--venvs", type=Path, default=ROOT / ".venv-releases", help="where the venvs are kept")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    wrong = [r for r in args.releases if not RELEASE.fullmatch(r)]
    if wrong:
        parser.error(f"not a torch release cgviz supports: {', '.join(wrong)} (write it in full, e.g. 2.12.1)")
    if args.dry_run:
        for release in args.releases:
            for command in commands(release, args.venvs / release):
                print(" ".join(command))
        return 0
    results = {release: run(release, args.venvs / release) for release in args.releases}
    print()
    for release, (status, last, seconds) in results.items():
        print(f"torch {release}: {'passed' if status == 0 else f'FAILED (exit {status})'} in {seconds:.0f} s: {last}")
    return 1 if any(status for status, _, _ in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
