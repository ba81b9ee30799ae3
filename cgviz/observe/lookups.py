"""Reads that a torch release may not answer: a missing name gives a default, not an error, so
an observed program keeps running on a torch whose layout is new to cgviz."""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any

import torch

_MISSING_REPORTED: set[str] = set()
_SENTINEL = object()


def read(obj: Any, name: str, default: Any = None) -> Any:
    """obj.name, or `default` with a one-time warning naming the missing attribute."""
    value = getattr(obj, name, _SENTINEL)
    if value is _SENTINEL:
        key = f"{type(obj).__name__}.{name}"
        if key not in _MISSING_REPORTED:
            _MISSING_REPORTED.add(key)
            warnings.warn(
                f"cgviz.observe_torch: torch {torch.__version__} has no {key}; "
                "that part of the trace is left out",
                RuntimeWarning,
                stacklevel=3,
            )
        return default
    return value


def lookup(module_name: str, *names: str) -> Any:
    """module.name1.name2... of an imported module (a dict's key where a part is a dict), or None
    where a part is missing."""
    value: Any = sys.modules.get(module_name)
    for name in names:
        if value is None:
            return None
        value = value.get(name) if isinstance(value, dict) else getattr(value, name, None)
    return value


def imported(module_name: str, *names: str) -> Any:
    """`lookup`, importing the module first; None where it cannot be imported."""
    try:
        importlib.import_module(module_name)
    except Exception:  # a torch without that module: what it would tell is not heard
        return None
    return lookup(module_name, *names)
