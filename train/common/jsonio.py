"""Atomic JSON files: a reader sees the old file or the new one, never half of one (standard library only)."""

import contextlib
import json
import os
import tempfile
from pathlib import Path


def write_json_atomic(path, obj):
    """Write `obj` as indented JSON to `path` atomically: a temp file in the same dir, fsync, os.replace.

    Readers see the old file or the new one, never half of one. The file gets mode 0644. Raises OSError.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(obj, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
