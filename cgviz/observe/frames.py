"""Reading Python frames by their code and locals alone: which function one runs, and which
object up the stack runs a given method. Callers pass the names to look for."""

from __future__ import annotations

from typing import Any, Optional

import torch


def function_name(frame: Any, wrapper: tuple[str, str], module_calls: tuple[str, ...]) -> str:
    """"Net.forward" for a method or a module's call (one of `module_calls`), else the function's
    name; a `wrapper` frame (function, file ending) names the `fn` it holds. '' for a frame of
    another shape."""
    try:
        code = frame.f_code
        name = code.co_name
        if name == wrapper[0] and code.co_filename.endswith(wrapper[1]):
            wrapped = frame.f_locals.get("fn")
            owner = getattr(wrapped, "__self__", wrapped)
            if isinstance(owner, torch.nn.Module):
                return f"{type(owner).__name__}.forward"
            return getattr(wrapped, "__name__", name)
        if code.co_argcount and code.co_varnames[0] == "self":
            owner = frame.f_locals.get("self")
            if owner is not None:
                method = "forward" if name in module_calls and isinstance(owner, torch.nn.Module) else name
                return f"{type(owner).__name__}.{method}"
        return name
    except Exception:  # a frame object of another shape: unnamed
        return ""


def owner_in_stack(frame: Any, filename: str, roles: dict[tuple[str, str], str]) -> Optional[tuple[str, Any]]:
    """(role, self) of the first frame up the stack, in `filename`, that runs a method named in
    `roles` ((class, method) -> role) on an object of that class; None where none does. Walks
    the live frames only, holding none of them."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename == filename:
            owner = frame.f_locals.get("self")
            role = roles.get((type(owner).__name__, code.co_name))
            if role is not None:
                return role, owner
        frame = frame.f_back
    return None
