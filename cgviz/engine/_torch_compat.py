"""The one place that touches private torch names.

Private names move between torch releases (2.11 on the GPU machines, 2.13 on CPU):
each is looked up once here, with the alternatives known, so the rest of cgviz
calls plain functions and `cgviz info` can list what was found.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, Optional

import torch

_C = torch._C


def _first(*names: str) -> tuple[Optional[str], Optional[Callable]]:
    for name in names:
        fn = getattr(_C, name, None)
        if fn is not None:
            return name, fn
    return None, None


# name we need -> alternatives across torch versions, newest first
CUDA_NAMES: dict[str, tuple[str, ...]] = {
    "begin_allocate_to_pool": ("_cuda_beginAllocateCurrentThreadToPool", "_cuda_beginAllocateCurrentStreamToPool"),
    "end_allocate_to_pool": ("_cuda_endAllocateToPool", "_cuda_endAllocateCurrentStreamToPool"),
    "release_pool": ("_cuda_releasePool",),
    "get_checkpoint_state": ("_cuda_getCheckpointState",),
    "set_checkpoint_pool_state": ("_cuda_setCheckpointPoolState",),
    "raw_delete": ("_cuda_cudaCachingAllocator_raw_delete",),
    "construct_storage_from_data_pointer": ("_construct_storage_from_data_pointer",),
    "set_storage_access_error_msg": ("_set_storage_data_ptr_access_error_msg", "_set_storage_access_error_msg"),
    "free_and_remove_deleter": ("_free_And_Remove_DeleterFn",),
    "has_standard_deleter": ("_has_Standard_Deleter",),
    "construct_tensor": ("_construct_CUDA_Tensor_From_Storage_And_Metadata",),
    "clear_cublas_workspaces": ("_cuda_clearCublasWorkspaces",),
}

FOUND: dict[str, Optional[str]] = {}
_FUNCS: dict[str, Optional[Callable]] = {}
for _need, _alts in CUDA_NAMES.items():
    FOUND[_need], _FUNCS[_need] = _first(*_alts)


def cuda_function(need: str) -> Callable:
    """The private CUDA function for `need`, or a RuntimeError naming the torch version."""
    fn = _FUNCS.get(need)
    if fn is None:
        raise RuntimeError(
            f"torch {torch.__version__} has none of {', '.join(CUDA_NAMES[need])}, which cgviz's "
            f"cuda backend needs ({need}); use a torch build with CUDA (2.4 or newer) or device='sim'"
        )
    return fn


# Newer torch marks a storage as inaccessible by weak pointer; older torch through a tensor.
STORAGE_ERROR_TAKES_STORAGE = FOUND["set_storage_access_error_msg"] == "_set_storage_data_ptr_access_error_msg"


def tensor_builder(device: Any) -> Callable[[dict, Any], Any]:
    """(metadata, storage) -> tensor on that storage; the fast private builder when present."""
    fast = _FUNCS.get("construct_tensor")
    if fast is not None:
        return fast

    def build(meta: dict, storage: Any) -> Any:
        t = torch.empty(0, dtype=meta["dtype"], device=device)
        return t.set_(storage, meta["storage_offset"], meta["size"], meta["stride"])

    return build


# Weak references to storages, as StorageWeakRef keeps them, without its Python wrapper
# (the replay path makes one per output).
storage_weak_ref = torch.UntypedStorage._weak_ref
weak_ref_expired = torch.UntypedStorage._expired
free_weak_ref = torch.UntypedStorage._free_weak_ref


# Generation cloning (torch 2.14+'s cudagraph_trees_generation_cloning) moves a storage onto new
# memory in place: a strong storage from a weak pointer, and a swap of two storages' memory.
storage_from_weak_ref = getattr(torch.UntypedStorage, "_new_with_weak_ptr", None)
swap_storage_memory = getattr(torch.UntypedStorage, "_swap_data_ptr_", None)


def make_subclass(cls: type, t: Any) -> Any:
    """A tensor of class `cls` on t's storage that is not a view of t (so t can be let go)."""
    return torch.Tensor._make_subclass(cls, t, False)


def foreach_copy(dst: list, src: list) -> None:
    """Copy many tensors with one launch where torch can."""
    torch._foreach_copy_(dst, src)


def missing_cuda_names() -> list[str]:
    return [need for need, name in FOUND.items() if name is None]


# How many strong references a storage has (by its weak pointer): the liveness of outputs, asked
# on the replay path (torch's own function, not a wrapper).
storage_use_count = _C._storage_Use_Count


try:  # dynamo's C++ tensor check (type, dispatch keys, dtype, device, requires_grad, sizes, strides)
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # a build without dynamo
    _TensorGuards = None


def signature_guard(tensors: tuple) -> Optional[Callable[..., bool]]:
    """A check, in C++, that a call's tensors match `tensors` in Python type, dispatch keys,
    dtype, device, requires_grad, sizes and strides: true only where cgviz's signature key
    would be equal too (it may be false where the key is equal: a subclass, inference mode).
    It raises TypeError for another number of arguments. None where torch has no such check
    or will not build it for these tensors."""
    if _TensorGuards is None:
        return None
    try:
        guard = _TensorGuards(
            *tensors,
            dynamic_dims_sizes=[list(t.shape) for t in tensors],
            dynamic_dims_strides=[list(t.stride()) for t in tensors],
        )
        return guard.check
    except Exception:  # another constructor signature: go without the shortcut
        return None


def storage_id(storage: Any) -> int:
    """A stable integer identity of an UntypedStorage's StorageImpl."""
    return storage._cdata


def torch_inlines_nn_modules() -> bool:
    """torch._dynamo.config.inline_inbuilt_nn_modules as torch 2.11's exceed_rerecord_limit
    reads it: its default (True) unless dynamo is imported and it was turned off."""
    config = sys.modules.get("torch._dynamo.config")
    if config is None:
        return True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated (always True) from torch 2.12 on
        return bool(getattr(config, "inline_inbuilt_nn_modules", True))
