"""Raw-text sources for train/prepare_data.py: what a job's ``dataset_path`` names, read as documents.

Three kinds of source, chosen by what the path is:

* ``None`` (the default corpus): the English documentation topics the Python standard library ships in
  ``pydoc_data.topics`` -- real prose, on every machine, no download.
* a text file, or a directory searched recursively for ``*.txt`` files (sorted, UTF-8): documents are paragraphs
  (blank-line separated, wrapped lines joined, long paragraphs cut at ``MAX_DOC_CHARS``), read streaming.
* a directory written by ``datasets``' ``save_to_disk`` (a Dataset or a DatasetDict with a ``train`` split or a
  single split): documents are the rows' ``text_column``.

Every source has a fingerprint (sha256 over its content) so a prepared artifact can tell whether it is stale.
Problems a user can fix raise ``DataError`` whose message reads ``<what>; <how to fix>``.

Stdlib only at import time; ``datasets`` is imported when a saved dataset is opened.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from train.artifact import sha256_file

MAX_DOC_CHARS = 20_000  # a "paragraph" longer than this (e.g. a file without blank lines) is cut here
_HASH_CHUNK = 1 << 20


class DataError(Exception):
    """A problem with the job's data that the user can fix; the message says what and how."""


@dataclass
class Source:
    """A corpus a job's dataset_path names (see open_source): its kind, absolute path, text column, a description
    for messages and, for text sources, the files read."""

    kind: str  # pydoc_topics | text_file | text_dir | saved_dataset
    path: str | None  # absolute path, None for pydoc_topics
    text_column: str
    description: str
    files: list[Path] = field(default_factory=list)  # text files, for text_file / text_dir

    def to_json(self, fingerprint: str) -> dict:
        """The source as prepare.json records it, with its content ``fingerprint`` (sha256 hex)."""
        return {
            "kind": self.kind,
            "path": self.path,
            "text_column": self.text_column if self.kind == "saved_dataset" else None,
            "description": self.description,
            "fingerprint": fingerprint,
        }


def _is_saved_dataset(path: Path) -> bool:
    # save_to_disk writes state.json + dataset_info.json (Dataset) or dataset_dict.json (DatasetDict)
    return (path / "dataset_dict.json").is_file() or (
        (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
    )


def open_source(dataset_path: str | None, text_column: str = "text") -> Source:
    """Resolve ``dataset_path`` to a Source, or raise DataError naming the path and the fix."""
    if dataset_path is None or str(dataset_path).strip() in ("", "null", "None"):
        return Source(
            kind="pydoc_topics",
            path=None,
            text_column=text_column,
            description=f"Python {platform.python_version()} standard library pydoc_data.topics (English text)",
        )
    path = Path(os.path.expanduser(str(dataset_path))).resolve()
    if not path.exists():
        raise DataError(
            f"dataset_path {str(dataset_path)!r} does not exist; "
            "set -e dataset_path= to a text file, a directory of .txt files or a datasets save_to_disk directory "
            "(or leave it unset for the built-in corpus)"
        )
    if path.is_file():
        _check_readable(path)
        return Source("text_file", str(path), text_column, f"text file {path}", files=[path])
    if not path.is_dir():
        raise DataError(f"dataset_path {path} is neither a file nor a directory; point it at a text file or directory")
    if _is_saved_dataset(path):
        return Source("saved_dataset", str(path), text_column, f"datasets save_to_disk directory {path}")
    files = sorted(p for p in path.rglob("*.txt") if p.is_file())
    if not files:
        raise DataError(
            f"dataset_path {path} holds no .txt files and is not a datasets save_to_disk directory; "
            "put UTF-8 .txt files in it or point dataset_path at a saved dataset"
        )
    for f in files:
        _check_readable(f)
    return Source("text_dir", str(path), text_column, f"{len(files)} .txt files under {path}", files=files)


def _check_readable(path: Path) -> None:
    if not os.access(path, os.R_OK):
        raise DataError(f"cannot read {path} (permission denied); make it readable by this user (chmod a+r)")


# --------------------------------------------------------------------------------------------------- fingerprint
def fingerprint(source: Source) -> str:
    """sha256 over the source's content (and, for directories, the relative names of its files)."""
    h = hashlib.sha256()
    h.update(source.kind.encode())
    try:
        if source.kind == "pydoc_topics":
            h.update(json.dumps(_pydoc_topics(), sort_keys=True).encode())
        elif source.kind == "text_file":
            h.update(sha256_file(source.files[0]).encode())
        elif source.kind == "text_dir":
            h.update(_tree_digest(Path(source.path), source.files).encode())
        else:  # saved_dataset: its files, minus the cache-*.arrow files datasets.map may leave beside them
            h.update(source.text_column.encode())
            h.update(fingerprint_tree(Path(source.path), skip_prefixes=(".", "cache-")).encode())
    except OSError as e:
        raise DataError(f"cannot read {e.filename or source.path}: {e.strerror}; check the path and its permissions")
    return h.hexdigest()


def _tree_digest(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.relative_to(root).as_posix()}\0{sha256_file(p)}\n".encode())
    return h.hexdigest()


def fingerprint_tree(root: Path, skip_prefixes: tuple[str, ...] = (".",)) -> str:
    """sha256 over the relative names and contents of every file under root (names starting with skip_prefixes
    are left out)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(skip_prefixes))
    return _tree_digest(root, files)


# ----------------------------------------------------------------------------------------------------- documents
def _pydoc_topics() -> dict[str, str]:
    from pydoc_data.topics import topics

    return topics


def _paragraphs(lines: Iterator[str]) -> Iterator[str]:
    buf: list[str] = []
    size = 0
    for line in lines:
        line = line.strip()
        if not line:
            if buf:
                yield " ".join(buf)
                buf, size = [], 0
            continue
        buf.append(line)
        size += len(line) + 1
        if size >= MAX_DOC_CHARS:
            yield " ".join(buf)
            buf, size = [], 0
    if buf:
        yield " ".join(buf)


def _file_paragraphs(path: Path) -> Iterator[str]:
    try:
        with open(path, encoding="utf-8", errors="strict") as f:
            yield from _paragraphs(f)
    except UnicodeDecodeError as e:
        raise DataError(
            f"{path} is not UTF-8 text (bad byte at offset {e.start}); convert it (iconv -t UTF-8) or remove it"
        ) from None
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror}; check the file and its permissions") from None


def load_saved_dataset(source: Source):
    """The rows of a save_to_disk directory (Dataset, or the train / only split of a DatasetDict)."""
    import datasets

    try:
        ds = datasets.load_from_disk(source.path)
    except Exception as e:  # noqa: BLE001 - any load failure is a data problem for the user
        raise DataError(
            f"cannot load the saved dataset at {source.path} ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
            "re-create it with Dataset.save_to_disk"
        ) from None
    if isinstance(ds, datasets.DatasetDict):
        if "train" in ds:
            ds = ds["train"]
        elif len(ds) == 1:
            ds = next(iter(ds.values()))
        else:
            raise DataError(
                f"the saved DatasetDict at {source.path} has splits {sorted(ds)} and none is 'train'; "
                "save the split to train on as 'train'"
            )
    if source.text_column not in ds.column_names:
        raise DataError(
            f"the saved dataset at {source.path} has no column {source.text_column!r} (columns: {ds.column_names}); "
            "set -e text_column= to the column holding the raw text"
        )
    return ds


def documents(source: Source) -> Iterator[str]:
    """Yield the source's documents (non-empty strings), streaming."""
    if source.kind == "pydoc_topics":
        for name in sorted(_pydoc_topics()):
            yield from _paragraphs(iter(_pydoc_topics()[name].splitlines()))
    elif source.kind in ("text_file", "text_dir"):
        for path in source.files:
            yield from _file_paragraphs(path)
    else:
        ds = load_saved_dataset(source)
        for batch in ds.iter(batch_size=1000):
            for text in batch[source.text_column]:
                if isinstance(text, str) and text.strip():
                    yield text
                elif text is not None and not isinstance(text, str):
                    raise DataError(
                        f"column {source.text_column!r} of {source.path} holds {type(text).__name__}, not text; "
                        "set -e text_column= to a string column"
                    )
