"""Checks of what users hand a tree, once each: its options, wrap()'s arguments, and the
first call of a function with an input signature (which becomes a Variant)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from cgviz._torch import rules as R
from cgviz.engine import _torch_compat as compat
from cgviz.engine.function import (
    MODES, TreeFunction, Variant, check_static, describe_signature, first_unsupported,
)
from cgviz.trace.model import safe_text

TRACE_LEVELS = (None, "events", "full")


def check_options(trace: Optional[str], profile: Optional[bool], values: bool, shape_limit: int,
                  name: Optional[str]) -> None:
    """Raise for a Tree option of the wrong type or value, before anything is set up."""
    if trace not in TRACE_LEVELS:
        raise ValueError(f"trace must be one of None, 'events', 'full', not {trace!r}")
    for arg, value in (("profile", profile), ("values", values)):
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"{arg} must be True or False, not {type(value).__name__} ({value!r})")
    if values and trace != "full":
        raise ValueError(f"values=True keeps output values in snapshots: it needs trace='full', not {trace!r}")
    if not isinstance(shape_limit, int) or isinstance(shape_limit, bool):
        raise TypeError(f"shape_limit must be an int, not {type(shape_limit).__name__} ({shape_limit!r})")
    if shape_limit < 0:
        raise ValueError(f"shape_limit must be a non-negative int, not {shape_limit!r}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a string or None, not {type(name).__name__}")


def wrap_arguments(fn: Callable, static: Any, name: Optional[str], mode: str,
                   taken: dict[str, Any]) -> tuple[str, tuple[int, ...]]:
    """wrap()'s name for `fn` (`name` or its __name__, made unique among `taken`: "f_2") and its
    static input indices; raises for a non-callable `fn`, an unknown `mode` or a bad argument."""
    if not callable(fn):
        raise TypeError(f"wrap() needs a callable, not {type(fn).__name__}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    static = check_static(static)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a string, not {type(name).__name__}")
    if name == "":
        raise ValueError("name must not be empty (leave it out to use the function's __name__)")
    base = name or getattr(fn, "__name__", None)
    if not isinstance(base, str) or not base:
        base = "fn"
    base = safe_text(base)  # shown and saved everywhere: must be valid UTF-8
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name, static


def new_variant(fn: TreeFunction, args: tuple, key: tuple, index: int, unsupported_input: Callable,
                rules: R.Rules, shape_limit: int) -> Variant:
    """The first call of `fn` with this input signature: check what can be checked once."""
    for i in fn.static:
        if i >= len(args):
            raise IndexError(f"{fn.name}: static input index {i} is out of range for {len(args)} inputs")
    variant = Variant(index, fn, key, describe_signature(args))
    variant.grad_inputs = tuple(i for i, a in enumerate(args) if a.requires_grad)
    variant.matches = compat.signature_guard(args)
    why = first_unsupported(args, {}, unsupported_input, check_grad=False)
    if why is not None:
        variant.eager_reason = f"{fn.name} runs eagerly: {why}"
    elif (why := R.signature_limit_reason(
        rules, fn.name, fn.graphed_signatures, shape_limit, variant.signature
    )) is not None:
        variant.eager_reason = why
    else:
        fn.graphed_signatures += 1
    fn.variants[key] = variant
    return variant
