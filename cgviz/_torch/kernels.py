"""What a captured CUDA graph holds: its nodes (kernels by name, copies, memsets), read from the
DOT file CUDA writes for it (`cudaGraphDebugDotPrint`, through torch's `CUDAGraph.debug_dump`).

Kernel names in that file are mangled C++ symbols (cuBLAS's are plain); they are demangled with
`c++filt` when it is installed, so they read as torch's profiler shows them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter

__all__ = ["graph_nodes", "kernel_counts", "kernel_counts_from_data", "demangle"]

# a node statement: "graph_4_node_0"[... label="{KERNEL\n| {ID | 0 (topoId: 4) | name\<\<\<grid,block,smem\>\>\>}..."]
_NODE = re.compile(r'^"[^"]+"\[[^\]]*?label="\{(?P<kind>[A-Z_]+)\s*(?P<body>.*?)"\];\s*$', re.S | re.M)
_KERNEL_NAME = re.compile(r"\{ID \| \d+ \(topoId: \d+\) \| (?P<name>.+?)(?:\\<\\<\\<.*?)?\}\s*$", re.M)


def graph_nodes(dot: str) -> list[tuple[str, str]]:
    """(kind, name) of each node of the graph in the DOT text: kind is CUDA's word (KERNEL,
    MEMCPY, MEMSET, HOST, EMPTY, ...); name is the kernel's symbol for kernels, else the kind."""
    out = []
    for m in _NODE.finditer(dot):
        kind = m.group("kind")
        name = kind.lower()
        if kind == "KERNEL":
            k = _KERNEL_NAME.search(m.group("body"))
            if k is not None:
                name = k.group("name").strip()
        out.append((kind, name))
    return out


_demangled: dict[str, str] = {}  # symbol -> its demangled name: a tree records the same kernels again and again


def demangle(names: list[str]) -> list[str]:
    """C++ symbols demangled by `c++filt` (one process for the names not seen before), or as
    they are without it."""
    mangled = list(dict.fromkeys(n for n in names if n.startswith("_Z") and n not in _demangled))
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return [_demangled.get(n, n) for n in names]
    try:
        done = subprocess.run([tool], input="\n".join(mangled), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return [_demangled.get(n, n) for n in names]
    plain = done.stdout.splitlines()
    if done.returncode == 0 and len(plain) == len(mangled):
        _demangled.update(zip(mangled, plain))
    return [_demangled.get(n, n) for n in names]


def kernel_counts(dot: str) -> list[list]:
    """``[[name, count], ...]`` for the graph's nodes in order of first appearance: kernels by
    their (demangled) name, other nodes by kind ("memcpy", "memset", ...)."""
    nodes = graph_nodes(dot)
    names = demangle([name for _, name in nodes])
    return [[name, count] for name, count in Counter(names).items()]


def kernel_counts_from_data(data: dict) -> list[list]:
    """`kernel_counts` from torch's `CUDAGraph.get_graph_data()` (torch 2.13+): the graph's nodes
    as data ({"nodes": [{"node_type": "kernel", "kernel_name": ...}, ...]}), no DOT to parse."""
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list):
        return []
    names = [str(n.get("kernel_name") or n.get("node_type") or "node") if isinstance(n, dict) else "node"
             for n in nodes]
    return [[name, count] for name, count in Counter(demangle(names)).items()]
