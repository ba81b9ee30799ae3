"""Reading torch's tree manager and compiler: the one package that knows their private names.

Private attributes of `torch._inductor.cudagraph_trees`, dynamo and inductor move between torch
releases. This module declares every private name cgviz.observe relies on, and which releases
have it; its two modules read them: `manager` (the tree manager, its nodes and outputs) and
`compiling` (dynamo's and inductor's compile-time decisions). Every read of a private attribute
goes through `read()` (`cgviz.observe.lookups`), which on a missing attribute says which one,
once, and returns a default, so an observed program keeps running on a torch whose layout is new
to cgviz. The helpers that name nothing of torch's live in sibling modules (releases, lookups,
torch_words, frames); the names they look for are passed from here.
"""

from __future__ import annotations

import sys
from typing import Optional

import torch

from cgviz._torch import rules
from cgviz.observe.releases import in_span, release

# The installed torch's release: what its tree manager decides differs by release (see SINCE).
RELEASE = release(str(torch.__version__))
RELEASE_NAME = f"{RELEASE[0]}.{RELEASE[1]}"

# -- every private name of torch that cgviz.observe relies on ------------------------------------
# tests/test_torch_layout.py checks each one against the installed torch. An entry that is a
# tuple of names lists alternatives (one of them is enough; the first one present is used).
TREES_MODULE = "torch._inductor.cudagraph_trees"
MANAGER_CLASS = "CUDAGraphTreeManager"
# The manager's method that every call of a compiled function goes through, looked up at call
# time (torch 2.2+; older torch has only run()).
RUN_METHODS = ("_run", "run")
# The manager's methods that the observer wraps, by the role the wrapper plays.
HOOKED_METHODS = {
    "warmup": "run_eager",
    "record": "record_function",
    "execute": "execute_node",
    "checkpoint": "apply_checkpoint_execution_state_in_allocator",
    "path_clear": "clear_current_path_state_and_set_to_none",
    "end_warmup": "try_end_curr_warmup",
    "dealloc": "dealloc_current_path_weakrefs",
    "warn": "check_warn_on_unable_to_start_executing",
    "add": "add_function",
    "shutdown": "shutdown",
    # torch 2.14+ (see SINCE): outputs cloned out of the pool at a generation, another warmup asked for
    "clone": "_clone_live_user_visible_storages",
    "warmup_incomplete": "mark_warmup_incomplete",
    # torch 2.15+: inputs that are outputs of the path and keep moving are copied, or the edge skipped
    "managed_input_limit": "_update_cudagraph_managed_input_rerecord",
}
# A node's (depth, output index) pairs of its path's outputs that died between its parent's
# recording and its own, and during its own: torch finds each dead again before it replays the
# node (check_invariants; 2.15 checks the second list in the node's run, before its graph).
CHECKED_DEAD = ("expected_dead_indices_before_graph", "expected_dead_indices_after_graph")
# Members of the module's classes that are read or called (instance attributes included).
CLASS_MEMBERS: dict[str, tuple] = {
    MANAGER_CLASS: (
        RUN_METHODS, *HOOKED_METHODS.values(), "get_func_name", "can_start_new_generation",
        "current_node", "current_gen", "running_forwards_with_pending_backwards", "in_recording",
        "roots", "path_state", "id_to_mode", "id_to_compile_id", "warned_functions",
        "cuda_graphs_thread_pool", "device_index", "ids_to_stack_traces",
        ("skip_cudagraph", "non_cudagraph_managed_mutation_hint"), "exceed_rerecord_limit", "_get_node_id",
        "ids_to_funcs", "active_warmup_function", "demoted_cudagraph_managed_idxs", "cudagraph_managed_input_rerecord",
    ),
    "CUDAGraphNode": ("id", "graph", "wrapped_function", "parent", "children", "outputs_weakrefs", "outputs_metadata",
                      "cached_tensor_outputs", "check_invariants", "device", "_record", *CHECKED_DEAD),
    "CheckInvariantStatus": ("StaticInputIdxMismatch", "CudagraphManagedIdxMismatch",
                             "ExpectedDeadIndicesBeforeGraphMismatch"),
    "CUDAWarmupNode": ("id", "wrapped_function", "parent", "outputs_weakrefs", "already_warm", "device_index"),
    "StorageWeakRefWrapper": ("expired", "ref", "extra_ref_check"),
    "StorageWeakRef": ("cdata",),  # the wrapper's `ref` (torch.multiprocessing.reductions)
    "GraphID": ("id",),
    "FunctionID": ("id",),
    "WrappedFunction": ("id", "kernel_free_cudagraph", "cudagraph_managed_input_rerecord_limit",
                        "cudagraph_managed_input_rerecord_action"),
    "MarkStepBox": ("mark_step_counter",),
    "GenerationTracker": ("generation",),
}
WARMUP_NODE_CLASS = "CUDAWarmupNode"
# The config options cgviz reads or names in its reasons (torch._inductor.config).
CONFIG_OPTIONS = (
    "triton.cudagraph_unexpected_rerecord_limit", "triton.cudagraph_trees_generation_cloning",
    "triton.cudagraph_managed_input_rerecord_limit", "triton.cudagraph_managed_input_rerecord_action",
    "triton.cudagraph_dynamic_shape_rerecord_limit", "triton.cudagraph_skip_dynamic_graphs",
)
# Names that only some releases have: the first release that has each ("Class.member",
# "config.option", "module.function"). Every other name above is in every release cgviz supports
# (2.11 to 2.15); tests/test_torch_surface.py checks both against each release's sources.
SINCE: dict[str, str] = {
    "CUDAGraphTreeManager._clone_live_user_visible_storages": "2.14",
    "CUDAGraphTreeManager.mark_warmup_incomplete": "2.14",
    "CUDAGraphTreeManager.active_warmup_function": "2.14",
    "WrappedFunction.kernel_free_cudagraph": "2.14",
    "triton.cudagraph_trees_generation_cloning": "2.14",
    "CUDAGraphTreeManager._update_cudagraph_managed_input_rerecord": "2.15",
    "CUDAGraphTreeManager.demoted_cudagraph_managed_idxs": "2.15",
    "CUDAGraphTreeManager.cudagraph_managed_input_rerecord": "2.15",
    "CUDAGraphTreeManager.skip_cudagraph": "2.15",
    "WrappedFunction.cudagraph_managed_input_rerecord_limit": "2.15",
    "WrappedFunction.cudagraph_managed_input_rerecord_action": "2.15",
    "triton.cudagraph_managed_input_rerecord_limit": "2.15",
    "triton.cudagraph_managed_input_rerecord_action": "2.15",
    "triton.cudagraph_dynamic_shape_rerecord_limit": "2.15",
    "graphs.register_graph_instantiate_hook": "2.14",
}
# ... and names the releases from 2.15 on no longer have (the last release that had each)
UNTIL: dict[str, str] = {
    "CUDAGraphTreeManager.non_cudagraph_managed_mutation_hint": "2.14",
}


def has_since(key: str) -> bool:
    """Does the installed torch have this name of SINCE / UNTIL (by release)?"""
    return in_span(RELEASE, SINCE.get(key), UNTIL.get(key))
# Compile-time "skipping cudagraphs due to ..." goes through this function; it is wrapped in
# each of these modules that has it (they import it by name).
SKIP_LOGGER = "log_cudagraph_skip_and_bump_counter"
SKIP_LOGGER_MODULES = (
    "torch._inductor.cudagraph_utils", "torch._inductor.cudagraph_trees",
    "torch._inductor.output_code", "torch._inductor.compile_fx",
)
# A graph whose CUDA graphs torch skipped at compile time never reaches the tree manager: its
# compiled graph (OUTPUT_CODE_MODULE.COMPILED_GRAPH_CLASS) calls `current_callable` on every
# call. torch decides in its `post_compile` (the `cudagraphs` box of its graph_kwargs is turned
# off), or already in CompiledFxGraph.__init__ (a lowering reason, with a skip message); the
# observer wraps that graph's `current_callable` to see its calls.
OUTPUT_CODE_MODULE = "torch._inductor.output_code"
COMPILED_GRAPH_CLASS = "CompiledFxGraph"
COMPILED_GRAPH_MEMBERS = ("post_compile", "current_callable", "fx_kwargs")
# What StorageWeakRefWrapper.expired() counts: the users of an output's storage (torch._C).
STORAGE_USE_COUNT = "_storage_Use_Count"
# What torch's check_refcount (a cached output's extra check in StorageWeakRefWrapper.expired())
# says of a cached output that C++ also holds (its tensor's _use_count() > 1): through 2.14 it is
# expired when Python holds it once beyond the cache (a parameter's .grad, say); from 2.15 it is
# live. (2.15 also detaches a stale grad_fn there first; the observer leaves that to torch.)
CPP_HELD_CACHED_OUTPUT_LIVE_SINCE = (2, 15)
CPP_HELD_CACHED_OUTPUT_LIVE = RELEASE >= CPP_HELD_CACHED_OUTPUT_LIVE_SINCE
# torch's count of its CUDA graph skips, and the compile id of the compilation under way.
SKIP_COUNTER = ("torch._dynamo.utils", "counters", "inductor", "cudagraph_skips")
COMPILE_CONTEXT = ("torch._guards", "CompileContext", "current_compile_id")


# dynamo says where and why it broke a graph through this method of its bytecode translator
# (translator, code_options, reason, exc); the user's stack is the exception's real_stack, or the
# tracing context's while it runs.
GRAPH_BREAK = ("torch._dynamo.symbolic_convert", "InstructionTranslatorBase", "log_graph_break")
TRACING_CONTEXT = ("torch._guards", "TracingContext", "extract_stack")


# dynamo compiles a Python frame through this callable (frame, cache_entry, hooks, frame_state):
# the frame names the function every graph of that compilation comes from.
CONVERT_FRAME = ("torch._dynamo.convert_frame", "ConvertFrameAssert", "__call__")


# inductor's scheduler hands each compiled graph's partitions to this method (partitions,
# signatures: signature.skip_cudagraph marks the ones kept out of CUDA graphs; should_partition(node)
# says why for each of their nodes).
PARTITIONS = ("torch._inductor.scheduler", "Scheduler", "_log_graph_partitions")


INDUCTOR_CACHE_DIR = ("torch._inductor.runtime.cache_dir_utils", "cache_dir")


# With graph partitioning (torch's default since 2.9), post_compile turns CUDA graphs off without
# a message where the graph has no partition to record, or its cudagraph_info lists reasons.
PARTITION_MAPS = "partition_maps"
CUDAGRAPH_INFO = ("cudagraph_info", "cudagraph_fail_reasons")


EAGER_MUTATION = "mutation"
EAGER_RERECORD_LIMIT = "rerecord_limit"
EAGER_MANAGED_INPUT_LIMIT = "managed_input_limit"
STATIC_INPUT_MISMATCH = "StaticInputIdxMismatch"


# torch's CheckInvariantStatus names -> the kinds of failed check the release rules count by
_MISMATCH_KINDS = {STATIC_INPUT_MISMATCH: rules.STATIC, "CudagraphManagedIdxMismatch": rules.MANAGED,
                   "ExpectedDeadIndicesBeforeGraphMismatch": rules.DEAD}


def rerecord_note(status: str) -> str:
    """What a re-record after a failed check of `status` (a CheckInvariantStatus name) does to
    torch's re-record limit in the installed release, in the engine's words (`cgviz._torch.rules`:
    one table for both producers): that no limit applies now, or that this check does not count;
    '' where it counts. 2.11 applies the limit only while dynamo's inline_inbuilt_nn_modules is off,
    read as its exceed_rerecord_limit reads it."""
    release = rules.rules_for(RELEASE_NAME)
    inlining = release.rerecord_limit_applies != rules.WITHOUT_INLINING or bool(
        getattr(sys.modules.get("torch._dynamo.config"), "inline_inbuilt_nn_modules", True))
    limit = rules.limit_in_force(release, inlining)
    kind = _MISMATCH_KINDS.get(status)
    if limit is None or (kind is not None and not release.counts(kind)):
        return rules.rerecord_note(release, [kind] if kind else [], 0, limit, "")
    return ""


# torch 2.15 says through its cudagraphs artifact logger, a child of this one whose records
# propagate here (torch._logging.warning_once), that a compiled graph hit
# cudagraph_dynamic_shape_rerecord_limit; its new shapes never reach the tree manager.
TREES_LOGGER = TREES_MODULE
DYNAMIC_SHAPE_LIMIT = "cudagraph_dynamic_shape_rerecord_limit"


# -- CUDA graphs made by the trees themselves, seen by cgviz.observe_graphs ------------------------
# A node captures its graph in CUDAGraphNode._record; the manager captures an empty graph when it
# is made (CUDAGraphTreeManager.__init__) to keep its pool alive.
NODE_RECORD = ("CUDAGraphNode", "_record")
MANAGER_INIT = (MANAGER_CLASS, "__init__")
# A node replays its graph in CUDAGraphNode.run_graph (2.11 to 2.15).
NODE_REPLAY = ("CUDAGraphNode", "run_graph")


# The readers, by the part of torch they read; imported last, as they read the names above.
from cgviz.observe._torch_layout.compiling import (
    cudagraphs_asked, cudagraphs_turned_off, compiled_graph_class, convert_frame_class, current_compile_id,
    frame_function_name, graph_break_class, graph_break_site, graph_mode, graph_stacks, inductor_cache_dir,
    partition_cuts, rerecord_limit, scheduler_class, silent_skip, skip_count,
)
from cgviz.observe._torch_layout.manager import (
    FoundDead, added_function_id, already_warm, cloned_outputs, compile_id, current_node, demoted_inputs, eager_cause,
    found_dead_by_torch, function_label, generation_check, is_kernel_free, is_warmup, live_outputs, managed_input_limit_reached,
    managed_input_rule, manager_class, manager_device, manager_index, node_children, node_device,
    node_function, node_parent, output_metadata, output_refs, outputs_live, path_state, path_to, pool_of,
    recorded_nodes, replay_mismatches, roots, run_method, stack_traces, starts_new_generation, torch_node_id, tracked_outputs,
    tree_capture,
    tree_replay,
)
