"""Record the corpus of reported surprises (examples/surprises/*.py) on GPUs with `cgviz run`.

    python scripts/record_surprises.py OUT_DIR [name ...]

Each program runs twice, as its user ran it and with `--fixed`, under
`python -m cgviz run --trace-out OUT_DIR/<name>[-fixed].cgtrace.json`, one program per GPU at a
time (CUDA_VISIBLE_DEVICES; PER_GPU programs share one, compiling on the CPU meanwhile), each in a
fresh process. What each printed goes to
OUT_DIR/<name>[-fixed].log; a summary (exit status, seconds, the doctor's first line) to
OUT_DIR/summary.json. Traces recorded here are shipped in cgviz/data/surprises/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from queue import Queue

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "examples" / "surprises"
TIMEOUT_S = 240
PER_GPU = int(os.environ.get("CGVIZ_RECORD_PER_GPU", "2"))


def _gpus() -> list[str]:
    import torch

    return [str(i) for i in range(max(torch.cuda.device_count(), 1))]


def _record(name: str, fixed: bool, out: Path, gpus: Queue) -> dict:
    stem = name + ("-fixed" if fixed else "")
    gpu = gpus.get()
    # a fresh inductor cache per run: each program compiles as on its user's first run (a cache
    # shared by runs at once hands one program's compiled graph, static inputs and all, to another)
    cache = tempfile.mkdtemp(prefix="inductor-cache-")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu, PYTHONPATH=str(ROOT), TORCHINDUCTOR_CACHE_DIR=cache)
    trace = out / f"{stem}.cgtrace.json"
    command = [sys.executable, "-m", "cgviz", "run", "--trace-out", str(trace),
               str(CASES / f"{name}.py"), *(["--fixed"] if fixed else [])]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
        status, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        status, text = "timeout", f"{exc.stdout or ''}{exc.stderr or ''}"
    finally:
        gpus.put(gpu)
    (out / f"{stem}.log").write_text(text if isinstance(text, str) else text.decode(errors="replace"))
    doctor = ""
    if trace.exists():
        found = subprocess.run([sys.executable, "-m", "cgviz", "doctor", str(trace)], capture_output=True,
                               text=True, env=env, cwd=ROOT)
        doctor = found.stdout
    return {"case": stem, "status": status, "seconds": round(time.perf_counter() - start, 1),
            "doctor": doctor.splitlines()[:4]}


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    names = argv[1:] or sorted(p.stem for p in CASES.glob("*.py"))
    gpus: Queue = Queue()
    for gpu in _gpus() * PER_GPU:
        gpus.put(gpu)
    jobs = [(name, fixed) for name in names for fixed in (False, True)]
    with ThreadPoolExecutor(gpus.qsize()) as pool:
        results = list(pool.map(lambda job: _record(*job, out, gpus), jobs))
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    for r in results:
        print(f"{r['case']:32} exit {r['status']!s:8} {r['seconds']:6}s  {(r['doctor'] or ['-'])[0][:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
