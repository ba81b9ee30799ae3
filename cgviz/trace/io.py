"""The Trace on disk: compact JSON with a format marker and a schema version.

Layout 2 (written now) stores snapshot content once. Every distinct snapshot, node, output,
segment and block (distinct by value) is one entry of its table, and whatever holds one names
it by its index there: a step its snapshot, a node its outputs, a segment its blocks. A
snapshot lists its nodes and segments as a delta against the previous snapshot entry, so a
step that changed one node of a thousand costs a few numbers, not a thousand nodes.
Layout 1 (every step's snapshot written out in full) still loads. docs/trace-format.md
describes both.

A step's `rank` (set only in a merged multi-rank trace, see cgviz/trace/ranks.py) and `device`
(set only where one process ran trees on several devices) are optional like every field with a
default: a trace of one rank on one device is written without them, and files written before
they existed load unchanged.

This module is the one place callers import from; each part has a module of its own:

- schema.py: the format marker, the layouts' top-level keys and tables, the model's fields;
- encode.py: writing (`to_dict`, `dumps`, `save_trace`);
- decode.py: reading and checking every field (`from_dict`, `loads`, `load_trace`);
- checks.py, meta_checks.py: what loading refuses beyond a field's type, and the free-form
  fields cgviz reads (a profile, a merged trace's ranks, an output's values);
- surrogates.py: lone surrogates, which UTF-8 cannot encode (`with_safe_text`);
- files.py: reading a user's file within a size limit, and writing one atomically.
"""

from __future__ import annotations

from cgviz.trace.checks import META_DEPTH, TraceFormatError
from cgviz.trace.decode import from_dict, load_trace, loads
from cgviz.trace.encode import dumps, save_trace, to_dict
from cgviz.trace.files import (
    MAX_FILE_BYTES, MAX_FILE_ENV, check_save_target, decompressed, max_file_bytes, read_file, write_atomic,
)
from cgviz.trace.schema import FORMAT
from cgviz.trace.surrogates import with_safe_text

__all__ = [
    "FORMAT", "MAX_FILE_BYTES", "MAX_FILE_ENV", "META_DEPTH", "TraceFormatError", "check_save_target", "decompressed",
    "dumps", "from_dict", "load_trace", "loads", "max_file_bytes", "read_file", "save_trace", "to_dict",
    "with_safe_text", "write_atomic",
]
