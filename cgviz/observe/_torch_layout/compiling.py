"""Reading dynamo's and inductor's compile-time decisions: frames compiled, graph breaks,
partitions kept out of CUDA graphs, CUDA graphs skipped and why (names declared in the package)."""

from __future__ import annotations

from typing import Any, Optional

from cgviz.observe import frames
from cgviz.observe._torch_layout import (
    COMPILE_CONTEXT, COMPILED_GRAPH_CLASS, COMPILED_GRAPH_MEMBERS, CONVERT_FRAME, CUDAGRAPH_INFO, GRAPH_BREAK,
    INDUCTOR_CACHE_DIR, OUTPUT_CODE_MODULE, PARTITION_MAPS, PARTITIONS, SKIP_COUNTER, TRACING_CONTEXT,
)
from cgviz.observe.lookups import imported, lookup, read


def convert_frame_class() -> Any:
    """dynamo's frame converter class (importing its module), or None."""
    return imported(*CONVERT_FRAME[:2])


# a compiled module's frame: dynamo compiles its call (one code for every module, a compile id each),
# in torch 2.11+ through an extra frame (external_utils.wrap_inline's `inner`, holding `fn`)
_MODULE_CALLS = ("_call_impl", "_wrapped_call_impl", "__call__")
_WRAPPED_FRAME = ("inner", "external_utils.py")


def frame_function_name(frame: Any) -> str:
    """The function a frame dynamo compiles runs: "Net.forward" for a method or a compiled
    module's call, else its name."""
    return frames.function_name(frame, _WRAPPED_FRAME, _MODULE_CALLS)


def scheduler_class() -> Any:
    """inductor's Scheduler class (importing its module), or None."""
    return imported(*PARTITIONS[:2])


def partition_cuts(scheduler: Any, args: tuple, kwargs: dict) -> Optional[tuple[int, list[tuple[str, str, str]]]]:
    """(how many partitions will be CUDA graphs, [(torch's reason, the op, its stack trace)] for
    the ops kept out of them), or None where the arguments cannot be read."""
    try:
        from torch._inductor.virtualized import V

        if "cuda" not in V.graph.device_types:  # a graph without GPU work: partitions do not matter (as torch)
            return None
        partitions = kwargs["partitions"] if "partitions" in kwargs else args[0]
        signatures = kwargs["signatures"] if "signatures" in kwargs else args[1]
        graphed = sum(1 for sig in signatures if not sig.skip_cudagraph)
        cuts = []
        for partition, sig in zip(partitions, signatures):
            if not sig.skip_cudagraph:
                continue
            for node in partition:
                reason = scheduler.should_partition(node)
                if not reason:
                    continue
                origin = node.node.get_origin_node() if getattr(node, "node", None) is not None else None
                target = str(getattr(origin, "target", "")) if origin is not None else ""
                stack = (origin.meta.get("stack_trace") or "") if origin is not None else ""
                cuts.append((str(reason), target, stack))
        return graphed, cuts
    except Exception:  # another release's partitions: not read
        return None


def inductor_cache_dir() -> Optional[str]:
    """Where inductor writes the code it generates (TORCHINDUCTOR_CACHE_DIR, or its default), or None."""
    cache_dir = imported(*INDUCTOR_CACHE_DIR)
    try:
        return str(cache_dir()) if cache_dir is not None else None
    except Exception:
        return None


def graph_break_class() -> Any:
    """dynamo's translator class that logs graph breaks (importing its module), or None."""
    return imported(*GRAPH_BREAK[:2])


def graph_break_site(translator: Any, args: tuple, kwargs: dict) -> Optional[tuple[str, str, tuple]]:
    """(the compiled function's name, dynamo's reason, (file, line, function, code) of the user's
    line that broke the graph) from a log_graph_break call, or None where it cannot be read."""
    try:
        reason = kwargs["reason"] if "reason" in kwargs else args[1]
        exc = kwargs["exc"] if "exc" in kwargs else (args[2] if len(args) > 2 else None)
        stack = getattr(exc, "real_stack", None)
        if not stack:
            extract = lookup(*TRACING_CONTEXT)
            stack = extract() if extract is not None else None
        frame = stack[-1] if stack else None
        site = (frame.filename, frame.lineno, frame.name, frame.line or "") if frame is not None else None
        code = getattr(translator, "f_code", None)
        return getattr(code, "co_name", ""), str(reason), site
    except Exception:  # another release's arguments: the break is not named
        return None


def rerecord_limit() -> Any:
    """torch's re-record limit (torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit)."""
    return config_value("triton.cudagraph_unexpected_rerecord_limit")


def skip_count() -> int:
    """How many times torch has skipped CUDA graphs in this process (0 where it keeps no count)."""
    import torch._dynamo.utils  # noqa: F401

    value = lookup(*SKIP_COUNTER)
    return value if isinstance(value, int) else 0


def current_compile_id() -> str:
    """The compile id of the compilation under way ("0/0"), or ''."""
    current = lookup(*COMPILE_CONTEXT)
    try:
        value = current() if current is not None else None
    except Exception:
        value = None
    return "" if value is None else str(value)


def compiled_graph_class() -> Any:
    """torch's compiled graph class (importing its module), or None with a one-time warning."""
    import importlib

    module = importlib.import_module(OUTPUT_CODE_MODULE)
    return read(module, COMPILED_GRAPH_CLASS)


def graph_mode(graph: Any) -> str:
    """A compiled graph's mode in torch's words: 'forward', 'backward' or 'inference'."""
    kwargs = getattr(graph, COMPILED_GRAPH_MEMBERS[2], None) or {}
    if kwargs.get("is_backward"):
        return "backward"
    return "inference" if kwargs.get("is_inference") else "forward"


def _cudagraphs_box(args: tuple, kwargs: dict) -> Any:
    """The `cudagraphs` box of a compiled graph's post_compile(example_inputs, constants,
    graph_kwargs) call (older torch: post_compile(example_inputs, cudagraphs, constants)), or None."""
    graph_kwargs = kwargs.get("graph_kwargs", args[-1] if args else None)
    box = graph_kwargs.get("cudagraphs") if isinstance(graph_kwargs, dict) else kwargs.get("cudagraphs")
    if box is None:
        box = next((a for a in args if type(a).__name__ == "BoxedBool"), None)
    return box


def cudagraphs_turned_off(args: tuple, kwargs: dict) -> bool:
    """After a compiled graph's post_compile: did torch turn its `cudagraphs` box off (the graph
    runs without CUDA graphs)?"""
    box = _cudagraphs_box(args, kwargs)
    return box is not None and not box


def cudagraphs_asked(args: tuple, kwargs: dict) -> bool:
    """Before a compiled graph's post_compile: is its `cudagraphs` box on (CUDA graphs asked for)?"""
    return bool(_cudagraphs_box(args, kwargs))


def silent_skip(graph: Any) -> Optional[str]:
    """Why torch turned a CUDA graph compiled graph's CUDA graphs off without saying so, in
    cgviz's words (None where it is not one of the known silent cases, or not a CUDA graph)."""
    if "cuda" not in (getattr(graph, "device_types", None) or ()):
        return None
    reasons = getattr(getattr(graph, CUDAGRAPH_INFO[0], None), CUDAGRAPH_INFO[1], None)
    if reasons:
        return "; ".join(map(str, reasons))
    maps = getattr(graph, PARTITION_MAPS, None)
    if maps is not None and len(maps) == 0:
        why = ("graph partitioning left no part of the graph to record as a CUDA graph: every kernel of it was "
               "cut out of the CUDA graphs")
        if config_value("triton.cudagraph_skip_dynamic_graphs"):
            why += (" (torch._inductor.config.triton.cudagraph_skip_dynamic_graphs = True cuts out every kernel that "
                    "uses a dynamic size)")
        return why
    return None


def graph_stacks(graph: Any) -> list[str]:
    """The stack traces torch keeps for a compiled graph's outputs (where the user's code made
    them), for naming the graph."""
    stacks = getattr(getattr(graph, CUDAGRAPH_INFO[0], None), "stack_traces", None) or []
    return [text for text in stacks if isinstance(text, str) and text]


def config_value(name: str) -> Any:
    """An inductor config option ("triton.cudagraph_skip_dynamic_graphs"), or None."""
    return lookup("torch._inductor.config", *name.split("."))
