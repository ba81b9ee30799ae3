"""The current path of a tree and the outputs on it: which are live, which inputs of a call
are among them, what mark_step() does to them, and the allocator checkpoint they are kept
through."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from cgviz.engine.node import Node
from cgviz._torch.rules import Rules

if TYPE_CHECKING:
    from cgviz.engine.backend import Backend

OVERWRITTEN = "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run"


def path_liveness(current: Optional[Node]) -> list[tuple[Node, int, bool]]:
    """Each output of the path ending at `current` (aliases left out), and whether it is alive."""
    if current is None:
        return []
    return [
        (n, i, n.output_alive(i))
        for n in current.path
        for i, leaf in enumerate(n.leaves)
        if leaf.ref is not None and leaf.alias_of is None
    ]


def managed_inputs(current: Optional[Node], args: tuple, address: Callable) -> dict[int, tuple[int, int, int]]:
    """Inputs that are live outputs of the current path: they stay in place, not copied."""
    if current is None:
        return {}
    owners = {}
    for n in current.path:
        for i, leaf in enumerate(n.leaves):
            if leaf.ref is not None and n.output_alive(i):
                owners[leaf.address] = (n.id, i, leaf.nbytes)
    found = {}
    for idx, a in enumerate(args):
        at = address(a)
        for base, (node_id, out, nbytes) in owners.items():
            if base <= at < base + max(nbytes, 1):
                found[idx] = (at, node_id, out)
    return found


def invalidate_path(current: Optional[Node], backend: "Backend", rules: Rules, old_generation: int,
                    new_generation: int, cloned: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """Invalidate the live outputs of the path ending at `current`, or, with generation cloning
    (torch 2.14+), clone them out of the pool (those of backward functions excepted) into `cloned`."""
    invalidated: list[tuple[int, int]] = []
    if current is None:
        return invalidated
    cloning = rules.generation_cloning is not None
    for node in current.path:
        for i in node.live_outputs():
            if cloning and node.variant.function.mode != "backward":
                if node.leaves[i].alias_of is None:  # an alias moves with the output it aliases
                    cloned.append((node.id, i, backend.clone_out(node.leaves[i].ref)))
                continue
            invalidated.append((node.id, i))
            node.invalid.add(i)
            if node.leaves[i].alias_of is not None:
                continue  # shares its storage with the output it aliases, invalidated with it
            message = (
                f"{OVERWRITTEN}: output {i} of {node.variant.label} (node {node.id}, generation "
                f"{old_generation}) was invalidated when mark_step() began generation {new_generation}. "
                "Clone it (y.clone()) before the next generation to keep it."
            )
            node.leaves[i].ref.invalidate(message)
    return invalidated


def restore_checkpoint(node: Node, backend: "Backend") -> str:
    """Put the allocator back as it was after `node`'s recording, keeping the path's live
    outputs and freeing those that died since; returns the checkpoint_restore step's reason."""
    live = [
        (n.leaves[i].address, n.leaves[i].ref)
        for n in node.path
        for i in n.live_outputs()
        if n.leaves[i].alias_of is None
    ]
    dead = list(dict.fromkeys(n.leaves[i].address for n, i in node.live_after if not n.output_alive(i)))
    backend.restore(node.checkpoint, live, dead)
    return (
        f"allocator state saved after recording node {node.id} restored, keeping {len(live)} live "
        f"output(s) of the path and freeing {len(dead)} that died since, so a new recording "
        "or warmup does not overwrite live memory"
    )
