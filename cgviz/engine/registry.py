"""Every live `Tree` of the process, weakly held, so tools (the `%%cudagraph` magic) can see
the steps that any tree takes without the user handing the trees over.

Trees register themselves in `Tree.__init__`. A tree leaves the registry when it is
garbage-collected: the registry never keeps one alive.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from cgviz.engine.tree import Tree

_lock = threading.Lock()
_order = itertools.count()
# creation number -> tree; a dict, so iteration follows creation order
_trees: "weakref.WeakValueDictionary[int, Tree]" = weakref.WeakValueDictionary()


def register(tree: "Tree") -> None:
    """Remember `tree` (weakly). Called once by every Tree when it is made."""
    with _lock:
        _trees[next(_order)] = tree


def all_trees() -> list["Tree"]:
    """The live trees, oldest first."""
    with _lock:
        return list(_trees.values())


def find(name: str) -> Optional["Tree"]:
    """The newest live tree whose `name` is `name`, or None."""
    for tree in reversed(all_trees()):
        if tree.name == name:
            return tree
    return None
