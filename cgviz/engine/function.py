"""Functions wrapped into a tree, and their per-input-signature variants."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch
from torch import Tensor, strided

if TYPE_CHECKING:
    from cgviz.engine.tree import Tree

MODES = ("inference", "forward", "backward")


@dataclass(eq=False)
class Variant:
    """One input signature (shapes, strides, dtypes) of a function: its own warmup and graphs."""

    id: int
    function: "TreeFunction"
    key: tuple
    signature: str
    warmed_up: bool = False
    eager_reason: Optional[str] = None  # set once the variant can never be graphed
    grad_inputs: tuple[int, ...] = ()  # inputs that require grad: eager while autograd is on
    mutated: frozenset[int] = frozenset()  # inputs it writes in place (seen at warmup)
    limited: bool = False  # went past rerecord_limit somewhere in the tree
    fast: bool = False  # warmed up, no mutated inputs, under the limit: the replay fast path may take it
    matches: Optional[Callable[..., bool]] = None  # args -> same signature, in C++ (None: torch has no such check)

    def refresh(self) -> None:
        """Recompute `fast` after what the tree knows of the variant changed."""
        self.fast = self.warmed_up and not self.mutated and not self.limited

    @property
    def label(self) -> str:
        """The function's name; steps and nodes carry the signature separately."""
        return self.function.name

    @property
    def described(self) -> str:
        """Name with signature when the function has several signatures: 'f(float32[2, 8])'."""
        if len(self.function.variants) > 1:
            return f"{self.function.name}{self.signature}"
        return self.function.name


class TreeFunction:
    """A callable that runs `fn` through its tree: warmup, then record, then replay."""

    def __init__(self, tree: "Tree", fn: Callable, name: str, static: tuple[int, ...], mode: str) -> None:
        self.tree = tree
        self.fn = fn
        self.name = name
        self.static = static
        self.mode = mode
        self.variants: dict[tuple, Variant] = {}
        self.graphed_signatures = 0  # variants allowed graphs (counted against shape_limit)
        self.latest: Optional[Variant] = None  # the variant of the latest call: checked first
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.tree._call(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<cgviz function {self.name!r} of {self.tree!r}>"


def signature_key(args: tuple) -> Optional[tuple]:
    """What must match for a graph to take these inputs: per tensor shape, stride, dtype,
    device and requires_grad. None when an input is not a strided tensor."""
    key = []
    for a in args:
        if not isinstance(a, Tensor) or a.layout is not strided:
            return None
        key.append((a.shape, a.stride(), a.dtype, a.get_device(), a.requires_grad))
    return tuple(key)


def describe_signature(args: tuple) -> str:
    parts = []
    for a in args:
        dtype = str(a.dtype).removeprefix("torch.")
        parts.append(f"{dtype}[{', '.join(str(s) for s in a.shape)}]")
    return "(" + ", ".join(parts) + ")"


def check_static(static: Any) -> tuple[int, ...]:
    """Validate `static=`: input indices whose tensors keep their address (parameters)."""
    if static is None:
        return ()
    if isinstance(static, int) and not isinstance(static, bool):
        static = (static,)
    try:
        out = tuple(static)
    except TypeError:
        raise TypeError(f"static must be a tuple of input indices, not {type(static).__name__}") from None
    for i in out:
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise ValueError(f"static must hold non-negative input indices, got {i!r}")
    return out


def first_unsupported(args: tuple, kwargs: dict, unsupported_input, check_grad: bool = True) -> Optional[str]:
    """Why this call cannot be graphed (the call then runs eagerly), or None."""
    if kwargs:
        return f"it was given keyword arguments ({', '.join(kwargs)}); graphs take positional tensors"
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            kind = type(a).__name__
            article = "an" if kind[:1].lower() in "aeiou" else "a"
            return f"input {i} is {article} {kind}, not a tensor (bind constants with functools.partial)"
        why = unsupported_input(a)
        if why is not None:
            return f"input {i} {why}"
        if check_grad and a.requires_grad and torch.is_grad_enabled():
            return grad_reason(i)
    return None


def grad_reason(i: int) -> str:
    return (
        f"input {i} requires grad and autograd is on; a graph cannot record autograd history "
        "(run under torch.no_grad(), or graph the forward and backward as separate functions)"
    )
