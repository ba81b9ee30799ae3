"""What each torch release decides differently in its CUDA graph trees, as data.

`Tree(rules="2.15")` decides as torch 2.15 does; by default a tree follows the installed torch.
Each field below was read from that release's torch/_inductor/cudagraph_trees.py, config.py
and cudagraph_utils.py (2.11.0, 2.12.1, 2.13.0, 2.14.1, 2.15.0); the comments name the torch
functions and options it comes from. The functions here are pure: they take counts and
settings and return decisions and the words that explain them, so the tree only keeps the
counts.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from cgviz.trace.units import plural

RELEASES = ("2.11", "2.12", "2.13", "2.14", "2.15")
FIRST, LAST = RELEASES[0], RELEASES[-1]

# Why a recorded graph cannot replay: the checks of CUDAGraphNode.check_invariants, in torch's
# order, named after its CheckInvariantStatus values.
MANAGED = "managed"  # CudagraphManagedIdxMismatch: an input that was an output of the path moved
DEAD = "dead"  # ExpectedDeadIndicesBeforeGraphMismatch: an output dead at recording is live now
STATIC = "static"  # StaticInputIdxMismatch: a static input (a parameter) moved
MISMATCH_WORDS = {
    MANAGED: "a moved input that was an output of the path",
    DEAD: "an output of the path live that was dead at recording",
    STATIC: "a moved static input",
}

# When cudagraph_unexpected_rerecord_limit applies (CUDAGraphTreeManager.exceed_rerecord_limit)
ALWAYS, NEVER, WITHOUT_INLINING = "always", "never", "without_inlining"
CLONING_MODES = (None, "user_visible")
MANAGED_ACTIONS = ("copy", "skip")


@dataclass(frozen=True)
class Rules:
    """The decisions of one torch release (and the options set for it).

    - rerecord_limit_applies: when triton.cudagraph_unexpected_rerecord_limit stops
      re-recording (exceed_rerecord_limit): "always" (2.13+), "never" (2.12: it returns False),
      "without_inlining" (2.11: only while torch._dynamo.config.inline_inbuilt_nn_modules is
      off; it is on by default).
    - unexpected_rerecord_limit: that option's value (128 in every release).
    - counts_*_rerecords: which failed check of a recorded child counts toward the limit when
      the call records again (`unexpected_rerecord = True` in CUDAGraphTreeManager._run).
    - managed_input_rerecord_limit / managed_input_action: 2.15's
      cudagraph_managed_input_rerecord_limit (5) and _action ("copy" or "skip"); None before.
    - dynamic_shape_rerecord_limit: 2.15's cudagraph_dynamic_shape_rerecord_limit (None: no
      limit); dynamic_shape_limit_available says whether the release has the option.
    - generation_cloning: triton.cudagraph_trees_generation_cloning (None, or "user_visible":
      live outputs are cloned out of the pool at a new generation instead of invalidated);
      generation_cloning_available: 2.14+.
    - kernel_free_graphs: 2.14+ keeps no CUDA graph for a compiled function that launches no
      kernels (kernel_free_cudagraph: its node has graph None, and a replay copies its inputs in and
      replays no graph).
    - warmup_incomplete_available: 2.14+ has mark_warmup_incomplete(): a function warming up
      asks for another warmup.
    """

    release: str
    rerecord_limit_applies: str
    unexpected_rerecord_limit: int
    counts_static_input_rerecords: bool
    counts_managed_input_rerecords: bool
    counts_dead_output_rerecords: bool
    managed_input_rerecord_limit: Optional[int]
    managed_input_action: Optional[str]
    dynamic_shape_limit_available: bool
    dynamic_shape_rerecord_limit: Optional[int]
    generation_cloning_available: bool
    generation_cloning: Optional[str]
    kernel_free_graphs: bool
    warmup_incomplete_available: bool

    @property
    def rerecord_limit(self) -> Optional[int]:
        """The re-record limit in force with torch's default settings; None: no limit."""
        return limit_in_force(self, inlining=True)

    def counts(self, kind: str) -> bool:
        """Whether a re-record after this kind of failed check counts toward the limit."""
        return {
            MANAGED: self.counts_managed_input_rerecords,
            DEAD: self.counts_dead_output_rerecords,
            STATIC: self.counts_static_input_rerecords,
        }[kind]

    def configured(self, **options: Any) -> "Rules":
        """These rules with torch options set (None leaves one as the release has it):
        rerecord_limit (cudagraph_unexpected_rerecord_limit), generation_cloning,
        managed_input_rerecord_limit, managed_input_action, dynamic_shape_rerecord_limit.
        An option the release does not have raises ValueError naming the release."""
        changes: dict[str, Any] = {}
        for name, value in options.items():
            if name not in _OPTIONS:
                raise TypeError(f"unknown rules option {name!r}; options: {', '.join(_OPTIONS)}")
            if value is None:
                continue
            field, torch_name, available, check = _OPTIONS[name]
            check(name, value)
            if available is not None and not getattr(self, available):
                raise ValueError(
                    f"{name}={value!r}: torch {self.release} has no {torch_name} (it came in torch "
                    f"{_first_with(available)}); use rules={_first_with(available)!r} or later"
                )
            changes[field] = value
        return dataclasses.replace(self, **changes) if changes else self


def _int_option(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__} ({value!r})")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int, not {value!r}")


def _choice(choices: tuple) -> Any:
    def check(name: str, value: Any) -> None:
        if value not in choices:
            shown = ", ".join(repr(c) for c in choices)
            raise ValueError(f"{name} must be one of {shown}, not {value!r}")

    return check


# option -> (Rules field, torch's option, the Rules flag saying the release has it, check)
_OPTIONS = {
    "rerecord_limit": ("unexpected_rerecord_limit", "cudagraph_unexpected_rerecord_limit", None, _int_option),
    "generation_cloning": (
        "generation_cloning", "cudagraph_trees_generation_cloning", "generation_cloning_available",
        _choice(CLONING_MODES[1:]),
    ),
    "managed_input_rerecord_limit": (
        "managed_input_rerecord_limit", "cudagraph_managed_input_rerecord_limit", "managed_input_rerecord_limit",
        _int_option,
    ),
    "managed_input_action": (
        "managed_input_action", "cudagraph_managed_input_rerecord_action", "managed_input_rerecord_limit",
        _choice(MANAGED_ACTIONS),
    ),
    "dynamic_shape_rerecord_limit": (
        "dynamic_shape_rerecord_limit", "cudagraph_dynamic_shape_rerecord_limit", "dynamic_shape_limit_available",
        _int_option,
    ),
}


def _release(
    release: str, applies: str, counts_static: bool, counts_dead: bool, *, from_2_14: bool = False,
    from_2_15: bool = False,
) -> Rules:
    return Rules(
        release=release,
        rerecord_limit_applies=applies,
        unexpected_rerecord_limit=128,  # triton.cudagraph_unexpected_rerecord_limit in every release
        counts_static_input_rerecords=counts_static,
        counts_managed_input_rerecords=True,
        counts_dead_output_rerecords=counts_dead,
        managed_input_rerecord_limit=5 if from_2_15 else None,
        managed_input_action="copy" if from_2_15 else None,
        dynamic_shape_limit_available=from_2_15,
        dynamic_shape_rerecord_limit=None,
        generation_cloning_available=from_2_14,
        generation_cloning=None,
        kernel_free_graphs=from_2_14,
        warmup_incomplete_available=from_2_14,
    )


TABLE: dict[str, Rules] = {
    # _run counts StaticInputIdxMismatch and CudagraphManagedIdxMismatch; exceed_rerecord_limit
    # returns False while dynamo inlines nn modules (its default)
    "2.11": _release("2.11", WITHOUT_INLINING, counts_static=True, counts_dead=False),
    # the same counting; exceed_rerecord_limit returns False
    "2.12": _release("2.12", NEVER, counts_static=True, counts_dead=False),
    # every failed check but StaticInputIdxMismatch counts; exceed_rerecord_limit compares again
    "2.13": _release("2.13", ALWAYS, counts_static=False, counts_dead=True),
    # + cudagraph_trees_generation_cloning, kernel_free_cudagraph, mark_warmup_incomplete
    "2.14": _release("2.14", ALWAYS, counts_static=False, counts_dead=True, from_2_14=True),
    # + cudagraph_managed_input_rerecord_limit/_action, cudagraph_dynamic_shape_rerecord_limit
    "2.15": _release("2.15", ALWAYS, counts_static=False, counts_dead=True, from_2_14=True, from_2_15=True),
}

_VERSION = re.compile(r"\s*(\d+)\.(\d+)(?:[.+a-z].*)?\s*", re.IGNORECASE)


def rules_for(release: Optional[str] = None) -> Rules:
    """The rules of a torch release: "2.13", "2.13.0", "2.13.0+cpu"; None: the installed torch.

    Releases before 2.11 get 2.11's rules and releases after 2.15 get 2.15's (the ones these
    rules were read from); `Rules.release` says which were chosen.
    """
    if release is None:
        import torch

        release = str(torch.__version__)
    if not isinstance(release, str):
        raise TypeError(f"rules must be a torch release such as '2.13', or None, not {type(release).__name__}")
    match = _VERSION.fullmatch(release)
    if match is None:
        raise ValueError(
            f"rules={release!r} is not a torch release: expected 'major.minor' such as '2.13' "
            f"(cgviz knows torch {FIRST} to {LAST}; earlier releases use {FIRST}'s rules, later ones {LAST}'s)"
        )
    version = (int(match[1]), int(match[2]))
    if version < _tuple(FIRST):
        return TABLE[FIRST]
    if version > _tuple(LAST):
        return TABLE[LAST]
    return TABLE[f"{version[0]}.{version[1]}"]


def configure(rules: Any = None, **options: Any) -> Rules:
    """A tree's rules: `rules` is a release (str), None (the installed torch) or a Rules; the
    options are set on top (see Rules.configured)."""
    if isinstance(rules, Rules):
        base = rules
    elif rules is None or isinstance(rules, str):
        base = rules_for(rules)
    else:
        raise TypeError(
            f"rules must be a torch release such as '2.13', a cgviz Rules, or None (the installed torch), "
            f"not {type(rules).__name__} ({rules!r})"
        )
    return base.configured(**options)


def _tuple(name: str) -> tuple[int, int]:
    major, minor = name.split(".")
    return int(major), int(minor)


def _first_with(flag: str) -> str:
    return next(name for name in RELEASES if getattr(TABLE[name], flag))


def span(rules: Rules, attribute: str) -> str:
    """The releases that decide as `rules` do on one field: 'torch 2.13+', 'torch 2.11–2.12',
    'torch 2.12'."""
    value = getattr(TABLE[rules.release], attribute)  # as released, whatever options are set
    i = RELEASES.index(rules.release)
    lo = hi = i
    while lo > 0 and getattr(TABLE[RELEASES[lo - 1]], attribute) == value:
        lo -= 1
    while hi < len(RELEASES) - 1 and getattr(TABLE[RELEASES[hi + 1]], attribute) == value:
        hi += 1
    if hi == len(RELEASES) - 1 and lo > 0:
        return f"torch {RELEASES[lo]}+"
    if lo == hi:
        return f"torch {RELEASES[lo]}"
    return f"torch {RELEASES[lo]}–{RELEASES[hi]}"


# -- the re-record limit ----------------------------------------------------------------------
def limit_in_force(rules: Rules, inlining: bool) -> Optional[int]:
    """The re-record limit that stops re-recording now, or None."""
    if rules.rerecord_limit_applies == ALWAYS or (rules.rerecord_limit_applies == WITHOUT_INLINING and not inlining):
        return rules.unexpected_rerecord_limit
    return None


def counted(rules: Rules, kinds: Iterable[str]) -> bool:
    """Whether a re-record after these failed checks (one per recorded child) counts."""
    return any(rules.counts(kind) for kind in kinds)


def exceeded(count: int, limit: Optional[int]) -> bool:
    """exceed_rerecord_limit: past the limit once more re-records were counted than it allows."""
    return limit is not None and count > limit


def _no_limit(rules: Rules) -> str:
    if rules.rerecord_limit_applies == NEVER:
        return f"no re-record limit in torch {rules.release} (it ignores cudagraph_unexpected_rerecord_limit)"
    return (
        f"no re-record limit in torch {rules.release} while torch._dynamo.config.inline_inbuilt_nn_modules "
        "is on (its default)"
    )


def rerecord_note(rules: Rules, kinds: Iterable[str], count: int, limit: Optional[int], where: str) -> str:
    """What recording again here does to the re-record limit, for the record step's reason.
    `count`: the re-records counted here so far (this one included, if it counts)."""
    kinds = list(dict.fromkeys(kinds))
    if limit is None:
        return _no_limit(rules)
    if counted(rules, kinds):
        return f"{count} of cudagraph_unexpected_rerecord_limit={limit} re-records {where}"
    kind = kinds[0]
    attribute = {STATIC: "counts_static_input_rerecords", DEAD: "counts_dead_output_rerecords"}[kind]
    return f"{span(rules, attribute)} does not count {MISMATCH_WORDS[kind]} toward cudagraph_unexpected_rerecord_limit"


_CAUSES = {
    MANAGED: "inputs that were outputs of the path moved",
    DEAD: "outputs dead at recording were live again",
    STATIC: "static inputs moved",
}


def limit_reason(rules: Rules, label: str, where: str, limit: int, mismatch: str) -> str:
    """Why a function runs eagerly at one place once past the re-record limit."""
    causes = " or ".join(_CAUSES[k] for k in (MANAGED, DEAD, STATIC) if rules.counts(k))
    return (
        f"{label} runs eagerly {where}: re-recorded {plural(limit, 'time')} there because {causes} "
        f"(cudagraph_unexpected_rerecord_limit in {span(rules, 'rerecord_limit_applies')}: rerecord_limit={limit}); "
        f"{mismatch}"
    )


# -- torch 2.15: inputs that are outputs of the path and keep moving --------------------------
@dataclass(frozen=True)
class ManagedMoves:
    """The outcome of counting moved path-output inputs at one place (parent, function)."""

    counts: Mapping[int, int]  # input index -> moves counted here
    demoted: frozenset[int]  # inputs copied from now on ("copy")
    newly_demoted: tuple[int, ...]  # demoted by this count
    reached: tuple[int, ...]  # inputs that reached the limit ("skip": the place runs eagerly)


def count_managed_moves(
    rules: Rules, counts: Mapping[int, int], demoted: Iterable[int], moved: Iterable[int]
) -> ManagedMoves:
    """CUDAGraphTreeManager._update_cudagraph_managed_input_rerecord (2.15): each moved input
    that may be copied counts one more move at this place; at the limit, "copy" demotes it to
    a copied input, "skip" makes the place run eagerly. Demoted inputs are no longer counted."""
    limit, action = rules.managed_input_rerecord_limit, rules.managed_input_action
    new_counts, demoted = dict(counts), frozenset(demoted)
    if limit is None:
        return ManagedMoves(new_counts, demoted, (), ())
    counted_now = [i for i in moved if action == "skip" or i not in demoted]
    reached = []
    for i in counted_now:
        new_counts[i] = new_counts.get(i, 0) + 1
        if new_counts[i] >= limit:
            reached.append(i)
    if action == "copy":
        return ManagedMoves(new_counts, demoted | set(reached), tuple(reached), ())
    return ManagedMoves(new_counts, demoted, (), tuple(reached))


def copyable(mutates_inputs: bool, static: bool, returned: bool) -> bool:
    """CUDAGraphNode.can_copy_cudagraph_managed_input (2.15): a moved path-output input may be
    copied (and so is counted) unless the function mutates inputs, the input is static, or
    the graph returns it (preserved_aliased_inputs)."""
    return not mutates_inputs and not static and not returned


def _inputs(indices: Iterable[int], owners: Mapping[int, str]) -> str:
    return ", ".join(f"input {i} ({owners[i]})" for i in indices)


def managed_note(rules: Rules, moves: ManagedMoves, moved: Iterable[int], owners: Mapping[int, str], where: str) -> str:
    """For the record step's reason: how the moves counted here stand, or what was demoted."""
    limit, action = rules.managed_input_rerecord_limit, rules.managed_input_action
    options = f"cudagraph_managed_input_rerecord_limit={limit}, action {action!r}"
    releases = span(rules, "managed_input_action")
    if moves.newly_demoted:
        them = "it" if len(moves.newly_demoted) == 1 else "them"
        return (
            f"{_inputs(moves.newly_demoted, owners)} moved {plural(limit, 'time')} {where}: {releases} copies {them} "
            f"from now on ({options})"
        )
    shown = [i for i in moved if i in moves.counts and i not in moves.demoted]
    counts = "; ".join(f"input {i} ({owners[i]}) moved {where}: move {moves.counts[i]} of {limit}" for i in shown)
    return f"{counts} ({releases}: {options})"


def managed_skip_reason(rules: Rules, label: str, moves: ManagedMoves, owners: Mapping[int, str], where: str) -> str:
    """Why a function runs eagerly at one place once a moved path-output input reached the
    limit with action "skip"."""
    limit = rules.managed_input_rerecord_limit
    return (
        f"{label} runs eagerly {where}: an input that is an output of the path kept moving there "
        f"({_inputs(moves.reached, owners)} moved {plural(limit, 'time')}), and {span(rules, 'managed_input_action')} runs "
        f"{label} eagerly at this place from now on (cudagraph_managed_input_rerecord_limit={limit}, action 'skip')"
    )


# -- input signatures -------------------------------------------------------------------------
def signature_limit_reason(
    rules: Rules, name: str, graphed: int, shape_limit: int, signature: str
) -> Optional[str]:
    """Why a new input signature of a function runs eagerly, or None when it may have graphs.
    `shape_limit` is cgviz's own limit; 2.15's cudagraph_dynamic_shape_rerecord_limit stops
    recording new shapes too (cudagraphify_impl: len(fn_cache) >= limit), while recorded ones replay."""
    limit = rules.dynamic_shape_rerecord_limit
    if limit is not None and graphed >= limit:
        return (
            f"{name} runs eagerly: {graphed} input signatures already have graphs "
            f"({span(rules, 'dynamic_shape_limit_available')}: cudagraph_dynamic_shape_rerecord_limit={limit}); "
            f"{signature} is one more, and runs eagerly while the signatures recorded keep replaying"
        )
    if graphed >= shape_limit:
        return (
            f"{name} runs eagerly: {graphed} input signatures already have graphs "
            f"(shape_limit={shape_limit}); {signature} is one more"
        )
    return None


# -- generations ------------------------------------------------------------------------------
def cloning_note(rules: Rules, cloned: list[tuple[int, int, int]], backward: list[tuple[int, int]]) -> str:
    """For the generation step's reason: the live outputs cloned out of the pool (node,
    output, bytes) and the backward outputs left to be invalidated."""
    said = ""
    where = f"{span(rules, 'generation_cloning_available')}: cudagraph_trees_generation_cloning='user_visible'"
    if cloned:
        total = sum(nbytes for _, _, nbytes in cloned)
        names = ", ".join(f"output {o} of node {n} ({nbytes:,} bytes)" for n, o, nbytes in cloned)
        said = f"; cloned out of the pool, so they keep their values ({where}): {names}, {total:,} bytes in all"
    if backward:
        names = ", ".join(f"output {o} of node {n}" for n, o in backward)
        said += f"; backward outputs are not cloned ({where}): {names}"
    return said


def warmup_incomplete_error(rules: Rules) -> str:
    first = _first_with("warmup_incomplete_available")
    return (
        f"mark_warmup_incomplete(): torch {rules.release} has no mark_warmup_incomplete (it came in torch "
        f"{first}); use rules={first!r} or later"
    )
