"""What a tree remembers per place, a (parent node id, variant id) pair, as torch decides
per node and function: re-recordings counted toward the limit, managed inputs that moved
(torch 2.15), and why a function runs eagerly there."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Optional

from cgviz._torch import rules as R
from cgviz.engine.function import Variant
from cgviz.engine.node import Node
from cgviz.engine.path import managed_inputs

if TYPE_CHECKING:
    from cgviz.engine.backend import Backend

Place = tuple[Optional[int], int]


class Places:
    """The per-place memory of one tree; `clear()` forgets it (Tree.reset())."""

    def __init__(self, rules: R.Rules, backend: "Backend") -> None:
        self.rules = rules
        self.backend = backend
        self.rerecords: Counter = Counter()  # place -> re-records counted there
        # torch 2.15, per place: moves counted per input, inputs copied from now on,
        # and why the place runs eagerly (action "skip")
        self.managed_moves: dict[Place, dict[int, int]] = {}
        self.demoted: dict[Place, frozenset[int]] = {}
        self.skips: dict[Place, str] = {}
        # place -> why a function that mutates inputs runs eagerly there, or None
        self.mutation_hints: dict[Place, Optional[str]] = {}

    def clear(self) -> None:
        """Forget every place: after reset() no node of theirs is left."""
        self.rerecords.clear()
        self.mutation_hints.clear()
        self.managed_moves.clear()
        self.demoted.clear()
        self.skips.clear()

    def eager_reason(self, variant: Variant, args: tuple, current: Optional[Node], limit: Optional[int]) -> Optional[str]:
        """Why `variant` runs eagerly at the current place of the tree, or None (torch decides
        this per node and function, before warming up or replaying)."""
        place = None if current is None else current.id
        if variant.limited:
            if (place, variant.id) in self.skips:
                return self.skips[place, variant.id]
            if R.exceeded(self.rerecords[place, variant.id], limit):
                return self.limit_reason(variant, current, limit, "the limit was reached here before")
        if variant.mutated:
            return self.mutation_hint(variant, args, current, refresh=False)
        return None

    def mutation_hint(self, variant: Variant, args: tuple, current: Optional[Node], refresh: bool) -> Optional[str]:
        """Whether `variant` must run eagerly here because it writes an input in place that is
        neither static nor an output of the current path: a graph would write its recorded copy,
        not the caller's tensor. Decided at the first call at each place, and again when no
        recorded child takes the call (as torch's non_cudagraph_managed_mutation_hint, skip_cudagraph
        from 2.15)."""
        place = (None if current is None else current.id, variant.id)
        if not refresh and place in self.mutation_hints:
            return self.mutation_hints[place]
        fn = variant.function
        managed = managed_inputs(current, args, self.backend.address)
        unmanaged = sorted(i for i in variant.mutated if i not in fn.static and i not in managed)
        why = None
        if unmanaged:
            idx = ", ".join(str(i) for i in unmanaged)
            where = "as a root" if place[0] is None else f"under node {place[0]}"
            why = (
                f"{variant.label} runs eagerly {where}: it mutates input {idx} in place, which here is neither "
                "static nor an output of the current path; a graph would mutate its recorded copy instead "
                "(pass the input as static, or hand it an output of the tree)"
            )
        self.mutation_hints[place] = why
        return why

    def limit_reason(self, variant: Variant, current: Optional[Node], limit: Optional[int], mismatch: str) -> str:
        """Why `variant` runs eagerly under `current` now that re-recording there passed `limit`."""
        where = "as a root" if current is None else f"under node {current.id}"
        return R.limit_reason(self.rules, variant.label, where, limit, mismatch)

    def count_managed_moves(self, place: Place, variant: Variant, args: tuple, children: Optional[list[Node]],
                            notes: list[str]) -> Optional[str]:
        """torch 2.15: count the inputs that were outputs of the path when the latest graph here
        was recorded and have moved since; note the count (or a demotion to copying) in `notes`
        and return why the place runs eagerly from now on (action "skip"), or None."""
        if self.rules.managed_input_rerecord_limit is None or not children:
            return None
        latest = children[-1]  # as torch: older graphs must not keep charging inputs that settled
        returned = {leaf.alias_of for leaf in latest.leaves}
        owners = {
            i: f"output {out} of node {node_id}"
            for i, (recorded, node_id, out) in latest.managed_addresses.items()
            if self.backend.address(args[i]) != recorded
            and R.copyable(bool(variant.mutated), i in variant.function.static, f"input {i}" in returned)
        }
        if not owners:
            return None
        moves = R.count_managed_moves(
            self.rules, self.managed_moves.get(place, {}), self.demoted.get(place, ()), owners
        )
        self.managed_moves[place], self.demoted[place] = dict(moves.counts), moves.demoted
        where = f"under node {place[0]}"
        if moves.reached:
            self.skips[place] = R.managed_skip_reason(self.rules, variant.label, moves, owners, where)
            return self.skips[place]
        notes.append(R.managed_note(self.rules, moves, owners, owners, where))
        return None
