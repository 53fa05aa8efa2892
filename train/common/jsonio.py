"""Atomic JSON files: a reader sees the old file or the new one, never half of one (standard library only)."""

import contextlib
import json
import os
import tempfile
from pathlib import Path


def write_text_atomic(path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically: a temp file in the same dir, fsync, os.replace.

    Readers see the old file or the new one, never half of one. The file gets mode 0644. Raises OSError.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path, obj):
    """Write `obj` as indented JSON (and a newline) to `path` atomically (:func:`write_text_atomic`).

    Readers see the old file or the new one, never half of one. The file gets mode 0644. Raises OSError.
    """
    write_text_atomic(path, json.dumps(obj, indent=2) + "\n")
