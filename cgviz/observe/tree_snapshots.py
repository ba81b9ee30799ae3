"""What a snapshot of torch's tree shows, read from its manager at trace level "full".

A snapshot is every recorded graph and the warmup nodes still alive, their outputs' state, the
path, and the pool's segments with the output that owns each block. The step log takes one only
when what it shows changed (`state`): reading torch's allocator costs milliseconds, so the pool
is read again only when the allocator's counters moved. The observer owns one `TreeSnapshots`
and hands it what it keeps of torch's nodes: their ids, labels, replay counts and generations.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any, Callable, Optional

from cgviz.observe import _torch_layout as layout
from cgviz.trace.model import NodeView, OutputView, Snapshot



class TreeSnapshots:
    """Snapshots of a tree manager, told by the observer what it knows of the nodes.

    `node_id(node)` gives a torch node's id in the trace (giving one at first sight), `live_nodes()`
    the nodes torch still keeps by id, `label(manager, function_id)` a function's name; `devices`
    (id(manager) -> 'cuda:1'), `replays` (node id -> count) and `born` (node id -> generation) are
    the observer's, read as they are when a snapshot is taken.
    """

    def __init__(self, node_id: Callable[[Any], Optional[int]], live_nodes: Callable[[], dict[int, Any]],
                 label: Callable[[Any, Any], str], devices: dict[int, Optional[str]], replays: Counter,
                 born: dict[int, int]) -> None:
        self.node_id = node_id
        self.live_nodes = live_nodes
        self.label = label
        self.devices = devices
        self.replays = replays
        self.born = born
        self.pool_reads: dict[int, Any] = {}  # device -> its manager's pool, read when the allocator moved (PoolReading)
        self._found_dead: dict[int, layout.FoundDead] = {}  # id(torch node) -> what reads found of its outputs
        self._returning: Optional[int] = None  # id(torch node) whose outputs torch's execute_node is returning
        # id(manager) -> (weakref to it, [(id(node), what reads found of it)] of the nodes it shows),
        # walked again when the tree may have changed (see `changed`)
        self._shown: dict[int, tuple[Any, list[tuple[int, layout.FoundDead]]]] = {}

    def snapshot(self, manager: Any, generation: int, invalidated: set[tuple[int, int]]) -> Snapshot:
        """Walk the manager: every recorded graph, warmup nodes seen, outputs, the pool."""
        live = self.live_nodes()
        views = [self.node_view(manager, n, live, generation, invalidated) for n in self.shown_nodes(manager, live)]
        views.sort(key=lambda v: v.id)
        current = layout.current_node(manager)
        path = [self.node_id(n) for n in layout.path_to(current)][::-1]  # ids given from the current node up
        state = (layout.path_state(manager) or "none").lower()
        return Snapshot(views, self.node_id(current), path, state, generation, self.segments(manager, views))

    def shown_nodes(self, manager: Any, live: dict[int, Any]) -> list:
        """The nodes a snapshot of `manager` shows: its recorded graphs, and the warmup nodes of
        its device that are still alive."""
        seen = layout.recorded_nodes(manager)
        device = self.devices.get(id(manager))
        ids = {id(node) for node in seen}
        for node in live.values():
            if layout.is_warmup(node) and id(node) not in ids and layout.node_device(node) == device:
                seen.append(node)
        return seen

    def state(self, manager: Any, invalidated: set[tuple[int, int]]) -> tuple:
        """What a snapshot of `manager` shows, but replay counts and the generation, in a cheap
        form (StepLog takes no new snapshot while it is unchanged): the nodes, their outputs'
        liveness and the path. The pool changes with it: replays allocate nothing. A replay loop
        reads this at each decision: the nodes shown are walked once per change of the tree."""
        returning, self._returning = self._returning, None
        shown = []
        for key, found, node in self._shown_now(manager):
            shown.append(key)
            if key == returning:  # every output torch tracks is in the list its caller holds
                shown.append(layout.tracked_outputs(node, found))
            else:
                shown.append(tuple(layout.live_outputs(node, found)))
        return id(layout.current_node(manager)), layout.path_state(manager), frozenset(invalidated), tuple(shown)

    def changed(self) -> None:
        """The trees may have changed in a way the nodes kept cannot tell (a node recorded or
        warmed up, a tree shut down, a decision off the replay loop): the nodes shown are walked
        again. A node kept that torch freed, or a manager's id() reused, is seen at the next read."""
        self._shown.clear()

    def _shown_now(self, manager: Any) -> list[tuple[int, layout.FoundDead, Any]]:
        """(id(node), what reads found of it, the node) of each node a snapshot of `manager`
        shows, in order. The walk is kept, holding the nodes weakly (see `changed`), and made
        again where a node it kept was freed (torch's, never named in the trace)."""
        kept = self._shown.get(id(manager))
        plan = kept[1] if kept is not None and kept[0]() is manager else None
        nodes = [] if plan is None else [found.node() for _, found in plan]
        if plan is None or None in nodes:
            nodes = self.shown_nodes(manager, self.live_nodes())
            plan = [(id(node), self._found(node)) for node in nodes]
            if len(self._found_dead) > len(nodes):  # nodes no longer shown (torch freed them): let their outputs go
                walks = [plan] + [walk for key, (_, walk) in self._shown.items() if key != id(manager)]
                self._found_dead = {key: found for walk in walks for key, found in walk}  # each kept walk's own
            self._shown[id(manager)] = (weakref.ref(manager), plan)
        return [(key, found, node) for (key, found), node in zip(plan, nodes)]

    def ran(self, node: Any) -> None:
        """torch ran `node`: its outputs found expired may be live again, and are asked anew."""
        found = self._found_dead.get(id(node))
        if found is not None:
            found.node_ran()

    def returning(self, node: Any) -> None:
        """torch replayed `node` and its execute_node is returning the outputs, held in one list:
        the next state shows each output torch tracks live, as expired() would find it, without
        asking (a replay loop's decision would ask each one, and most are asked right after).
        The outputs of its path that torch found dead before the replay are not asked either
        (a backward's replay finds its forward's saved outputs dead)."""
        found = self._found(node)
        found.node_ran()
        self._returning = id(node)
        checks = found.torch_checks
        if checks is None:  # the same at every replay: torch makes the lists when it records the node
            checks = found.torch_checks = []
            for ancestor, indices in layout.found_dead_by_torch(node):
                count = len(layout.output_refs(ancestor))
                rest = tuple(i for i in range(count) if i not in indices)
                checks.append((weakref.ref(ancestor), count, frozenset(indices), rest))
        for ancestor, count, indices, rest in checks:
            ancestor = ancestor()
            if ancestor is not None:
                self._found(ancestor).found_expired(count, indices, rest)

    def _found(self, node: Any) -> layout.FoundDead:
        """What reads found of `node`'s outputs (afresh for a node not seen, or freed)."""
        key = id(node)
        found = self._found_dead.get(key)
        if found is None or not found.of(node):
            found = self._found_dead[key] = layout.FoundDead(node)
        return found

    def node_view(self, manager: Any, node: Any, live: dict[int, Any], generation: int,
                  invalidated: set[tuple[int, int]]) -> NodeView:
        cg_id = self.node_id(node)
        fid = layout.node_function(node)
        meta = layout.output_metadata(node)
        outputs = []
        for i, (ref, alive) in enumerate(zip(layout.output_refs(node), layout.outputs_live(node))):
            m = meta[i] if i < len(meta) and isinstance(meta[i], dict) else {}
            if (cg_id, i) in invalidated:
                state = "invalid"
            else:
                state = "live" if alive else "dead"
            address = ref.data_ptr() if ref is not None else m.get("data_ptr")
            dtype = str(m.get("dtype", "")).removeprefix("torch.")
            outputs.append(OutputView(i, list(m.get("size", ())), dtype, int(m.get("nbytes", 0) or 0), address, state,
                                      None if ref is not None else "untracked"))
        children = [self.node_id(c) for c in layout.node_children(node)]
        children += [i for i, n in live.items() if layout.is_warmup(n) and layout.node_parent(n) is node]
        return NodeView(
            id=cg_id, function=self.label(manager, fid), kind="warmup" if layout.is_warmup(node) else "graph",
            parent=self.node_id(layout.node_parent(node)), children=sorted(children),
            generation=self.born.get(cg_id, generation), replays=self.replays[cg_id], outputs=outputs,
            signature=layout.torch_node_id(node),
        )

    def segments(self, manager: Any, views: list[NodeView]) -> list:
        pool = layout.pool_of(manager)
        device = layout.manager_index(manager)
        if pool is None or device is None:
            return []
        from cgviz._torch.allocator import PoolReading
        from cgviz.trace.ownership import owned_segments

        reading = self.pool_reads.get(device)
        if reading is None or reading.pool != tuple(pool):
            reading = self.pool_reads[device] = PoolReading(device, pool)
        return owned_segments(reading.segments(), views, {})
