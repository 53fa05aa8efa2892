"""Raw-text sources for train/data/prepare_data.py: what a job's ``dataset_path`` names, read as documents.

Kinds of source, chosen by what ``dataset_path`` is:

* ``None`` (the default corpus): the English documentation topics the Python standard library ships in
  ``pydoc_data.topics`` -- real prose, on every machine, no download.
* a text file (any file not named below), or a directory searched recursively for ``*.txt`` files (sorted, UTF-8):
  documents are paragraphs (blank-line separated, wrapped lines joined, long paragraphs cut at ``MAX_DOC_CHARS``),
  read streaming.
* a table file -- ``*.parquet``, ``*.jsonl`` / ``*.json`` (JSON Lines, or one JSON array of objects), ``*.csv``
  (with a header row) -- or a directory searched recursively for files of one of those formats: read with
  ``datasets.load_dataset("parquet" | "json" | "csv", data_files=...)``; documents are the rows' ``text_column``.
* a directory written by ``datasets``' ``save_to_disk`` (a Dataset or a DatasetDict with a ``train`` split or a
  single split): documents are the rows' ``text_column``.
* ``hub:REPO_ID[:CONFIG[:SPLIT]]``, a data set on the Hugging Face hub, e.g.
  ``hub:Salesforce/wikitext:wikitext-2-raw-v1`` or ``hub:Salesforce/wikitext:wikitext-2-raw-v1:train[:10%]``
  (CONFIG empty or left out: the default one; SPLIT left out: ``train``): loaded with ``datasets.load_dataset`` on
  the head into the datasets cache (HF_DATASETS_CACHE), which needs network (or that split already in the cache)
  and HF_HUB_OFFLINE / HF_DATASETS_OFFLINE unset; documents are the rows' ``text_column``.

A directory that mixes formats (``.txt`` and ``.csv``, say) is refused: keep one format per directory.

Every source has a fingerprint (sha256 over its content; for a hub data set, over the datasets cache's fingerprint of
the split, which follows the hub revision) so a prepared artifact can tell whether it is stale. Problems a user can
fix raise ``DataError`` whose message reads ``<what> (<where>); <how to fix>``.

Stdlib only at import time; ``datasets`` is imported when a table, saved dataset or hub data set is opened.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from train.data.artifact import RACY_NS, sha256_file, write_stamp

MAX_DOC_CHARS = 20_000  # a "paragraph" longer than this (e.g. a file without blank lines) is cut here
_HASH_CHUNK = 1 << 20
HUB_PREFIX = "hub:"
# file name ending -> datasets packaged builder ("text": paragraphs, read by this module)
TABLE_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}
_DIR_FORMATS = {".txt": "text", **TABLE_FORMATS}
_COLUMN_KINDS = ("saved_dataset", "table_file", "table_dir", "hub")  # sources read through text_column


class DataError(Exception):
    """A problem with the job's data that the user can fix; the message says what and how."""


@dataclass
class Source:
    """A corpus a job's dataset_path names (see open_source): its kind, path, text column, a description for
    messages and, for file sources, the files read.

    ``path`` is the absolute path (None for pydoc_topics; the normalised ``hub:REPO:CONFIG:SPLIT`` for hub).
    ``fmt`` is the datasets builder of a table source (parquet | json | csv), else None. ``hub`` is
    {"repo", "config" (None: default), "split"} for a hub source, else None. ``cache_dir``: where a table source's
    load_dataset writes its Arrow copy (None: the datasets cache); prepare_data points it at its scratch directory.
    """

    kind: str  # pydoc_topics | text_file | text_dir | table_file | table_dir | saved_dataset | hub
    path: str | None
    text_column: str
    description: str
    files: list[Path] = field(default_factory=list)  # the files read, for text_* / table_*
    fmt: str | None = None
    hub: dict | None = None
    cache_dir: str | None = None
    loaded: object = field(default=None, repr=False, compare=False)  # a hub source's rows, once load_hub ran

    def to_json(self, fingerprint: str) -> dict:
        """The source as prepare.json records it, with its content ``fingerprint`` (sha256 hex)."""
        return {
            "kind": self.kind,
            "path": self.path,
            "format": self.fmt,
            "hub": self.hub,
            "files": len(self.files) if self.files else None,
            "text_column": self.text_column if self.kind in _COLUMN_KINDS else None,
            "description": self.description,
            "fingerprint": fingerprint,
        }

    @property
    def reads_column(self) -> bool:
        """True when documents are the rows' text_column (tables, saved datasets, hub), False for plain text."""
        return self.kind in _COLUMN_KINDS


def _is_saved_dataset(path: Path) -> bool:
    # save_to_disk writes state.json + dataset_info.json (Dataset) or dataset_dict.json (DatasetDict)
    return (path / "dataset_dict.json").is_file() or (
        (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
    )


def parse_hub(spec: str) -> dict:
    """Split a ``hub:REPO_ID[:CONFIG[:SPLIT]]`` dataset_path into {"repo", "config" (None: the default), "split"}.

    SPLIT keeps any colons (``train[:10%]``) and defaults to ``train``. Raises DataError when REPO_ID is empty or not
    ``name`` / ``owner/name``.
    """
    rest = spec.strip()[len(HUB_PREFIX):]
    parts = rest.split(":", 2)
    repo = parts[0].strip()
    config = parts[1].strip() if len(parts) > 1 and parts[1].strip() else None
    split = parts[2].strip() if len(parts) > 2 and parts[2].strip() else "train"
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", repo):
        raise DataError(
            f"dataset_path {spec!r} does not name a hub data set (dataset_path); "
            "write hub:REPO_ID[:CONFIG[:SPLIT]], e.g. hub:Salesforce/wikitext:wikitext-2-raw-v1 or "
            "hub:Salesforce/wikitext:wikitext-2-raw-v1:train[:10%]"
        )
    return {"repo": repo, "config": config, "split": split}


def _format_of(path: Path) -> str:
    return _DIR_FORMATS.get(path.suffix.lower(), "text")


def open_source(dataset_path: str | None, text_column: str = "text") -> Source:
    """Resolve ``dataset_path`` to a Source (nothing is read yet but file names and permissions).

    Accepts None / "" (built-in corpus), a file (.parquet / .jsonl / .json / .csv: a table; anything else: text), a
    directory (save_to_disk output, or files of one format among .txt / .parquet / .jsonl / .json / .csv, searched
    recursively) or ``hub:REPO_ID[:CONFIG[:SPLIT]]``.

    Raises:
        DataError: the path does not exist, cannot be read, holds no usable files, mixes formats, or the hub name is
            malformed; the message names the path and the fix.
    """
    if dataset_path is None or str(dataset_path).strip() in ("", "null", "None"):
        return Source(
            kind="pydoc_topics",
            path=None,
            text_column=text_column,
            description=f"Python {platform.python_version()} standard library pydoc_data.topics (English text)",
        )
    if str(dataset_path).strip().startswith(HUB_PREFIX):
        hub = parse_hub(str(dataset_path))
        spec = f"{HUB_PREFIX}{hub['repo']}:{hub['config'] or ''}:{hub['split']}"
        config = f", config {hub['config']}" if hub["config"] else ""
        return Source("hub", spec, text_column, f"hub data set {hub['repo']}{config}, split {hub['split']}", hub=hub)
    path = Path(os.path.expanduser(str(dataset_path))).resolve()
    if not path.exists():
        hint = ""
        if not str(dataset_path).startswith(("/", ".", "~")) and "/" in str(dataset_path):
            hint = f"; for a Hugging Face hub data set write dataset_path=hub:{dataset_path}"
        raise DataError(
            f"dataset_path {str(dataset_path)!r} does not exist; "
            "set -e dataset_path= to a text file, a directory of .txt files, a .parquet / .jsonl / .json / .csv file "
            "or directory of them, a datasets save_to_disk directory or hub:REPO_ID[:CONFIG[:SPLIT]] "
            f"(or leave it unset for the built-in corpus){hint}"
        )
    if path.is_file():
        _check_readable(path)
        fmt = _format_of(path)
        if fmt == "text":
            return Source("text_file", str(path), text_column, f"text file {path}", files=[path])
        return Source("table_file", str(path), text_column, f"{fmt} file {path}", files=[path], fmt=fmt)
    if not path.is_dir():
        raise DataError(f"dataset_path {path} is neither a file nor a directory; point it at a text file or directory")
    if _is_saved_dataset(path):
        return Source("saved_dataset", str(path), text_column, f"datasets save_to_disk directory {path}")
    by_suffix: dict[str, list[Path]] = {}
    for p in sorted(path.rglob("*")):
        if p.suffix.lower() in _DIR_FORMATS and p.is_file():
            by_suffix.setdefault(p.suffix.lower(), []).append(p)
    formats = {_DIR_FORMATS[suffix] for suffix in by_suffix}
    if not formats:
        raise DataError(
            f"dataset_path {path} holds no .txt, .parquet, .jsonl, .json or .csv files and is not a datasets "
            "save_to_disk directory; put UTF-8 .txt files (or table files with a text column) in it or point "
            "dataset_path at a saved dataset"
        )
    if len(formats) > 1:
        counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(by_suffix.items()))
        raise DataError(
            f"dataset_path {path} mixes file formats ({counts}); keep files of one format in the directory "
            "(.txt, .parquet, .jsonl/.json or .csv) or point dataset_path at one file"
        )
    (fmt,) = formats
    files = sorted(f for group in by_suffix.values() for f in group)
    for f in files:
        _check_readable(f)
    exts = "/".join(sorted(by_suffix))
    if fmt == "text":
        return Source("text_dir", str(path), text_column, f"{len(files)} .txt files under {path}", files=files)
    return Source("table_dir", str(path), text_column, f"{len(files)} {exts} files under {path}", files=files,
                  fmt=fmt)


def _check_readable(path: Path) -> None:
    if not os.access(path, os.R_OK):
        raise DataError(f"cannot read {path} (permission denied); make it readable by this user (chmod a+r)")


# --------------------------------------------------------------------------------------------------- fingerprint
def fingerprint(source: Source) -> str:
    """sha256 hex over the source's content (and, for directories, the relative names of its files; for tables, saved
    datasets and hub data sets, the text_column too).

    A hub source is loaded to be fingerprinted (load_hub: network, or the split in the datasets cache); its
    fingerprint is the datasets cache's for that split, which changes with the hub revision.

    Raises:
        DataError: a file cannot be read, or the hub data set cannot be loaded (see load_hub).
    """
    h = hashlib.sha256()
    h.update(source.kind.encode())
    try:
        if source.kind == "pydoc_topics":
            h.update(json.dumps(_pydoc_topics(), sort_keys=True).encode())
        elif source.kind == "text_file":
            h.update(sha256_file(source.files[0]).encode())
        elif source.kind == "text_dir":
            h.update(_tree_digest(Path(source.path), source.files).encode())
        elif source.kind in ("table_file", "table_dir"):
            h.update(f"{source.fmt}\0{source.text_column}\0".encode())
            root = Path(source.path) if source.kind == "table_dir" else source.files[0].parent
            h.update(_tree_digest(root, source.files).encode())
        elif source.kind == "hub":
            ds = load_hub(source)
            h.update(json.dumps([source.hub, source.text_column, ds._fingerprint, len(ds)]).encode())
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


def source_files(source: Source) -> list[Path] | None:
    """The files whose contents ``fingerprint`` hashes, in its order (None for pydoc_topics and hub sources)."""
    if source.kind in ("text_file", "text_dir", "table_file", "table_dir"):
        return list(source.files)
    if source.kind == "saved_dataset":
        root = Path(source.path)
        return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith((".", "cache-")))
    return None


def _stat_state(source: Source) -> dict | None:
    files = source_files(source)
    if files is None:
        return None
    try:
        return {"source": [source.kind, source.path, source.text_column, source.fmt],
                "files": {str(p): [(st := p.stat()).st_size, st.st_mtime_ns] for p in files}}
    except OSError:
        return None


def cached_fingerprint(source: Source, stamp: Path) -> str | None:
    """The fingerprint ``record_fingerprint`` stored in ``stamp`` for ``source`` when the source's files still have
    the names, sizes and mtimes they had then (and none was modified within 2 s of that hashing: a rewrite within
    the file system's timestamp granularity could keep its mtime); else None (hash it: ``fingerprint``).
    Re-hashing a 50 GB corpus at every run costs minutes; this is rsync's "quick check" instead."""
    try:
        recorded = json.loads(Path(stamp).read_text(encoding="utf-8"))
        fp, at = recorded.pop("fingerprint"), recorded.pop("hashed_at_ns")
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    state = _stat_state(source)
    if state is None or state != recorded or not isinstance(at, int):
        return None
    if any(mtime >= at - RACY_NS for _size, mtime in state["files"].values()):
        return None
    return fp


def record_fingerprint(source: Source, stamp: Path, fp: str, hashed_at_ns: int) -> None:
    """Store ``fp`` with the source files' names, sizes and mtimes in ``stamp`` (atomically) for
    ``cached_fingerprint``; ``hashed_at_ns`` is time.time_ns() from before the hashing began. Nothing is stored for
    sources without files, or when the stamp cannot be written (the next run hashes again)."""
    state = _stat_state(source)
    if state is None:
        return
    write_stamp(stamp, dict(state, fingerprint=fp, hashed_at_ns=hashed_at_ns))


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


def _first_line(e: BaseException, limit: int = 200) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:limit]}" if text else type(e).__name__


def _quiet_datasets() -> None:
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # builders log a failure before raising it
    try:  # huggingface_hub prints a "Retrying in Ns" line per failed request; the error line says it all
        import huggingface_hub.utils.logging as hub_logging

        hub_logging.set_verbosity_error()
    except ImportError:
        pass


def _check_column(ds, source: Source, where: str):
    if source.text_column not in ds.column_names:
        raise DataError(
            f"text_column {source.text_column!r} is not a column of {where} (columns: {', '.join(ds.column_names)}); "
            "set -e text_column= to the column holding the raw text"
        )
    return ds


def load_saved_dataset(source: Source):
    """The rows of a save_to_disk directory (Dataset, or the train / only split of a DatasetDict).

    Returns a ``datasets.Dataset`` with ``source.text_column`` among its columns.

    Raises:
        DataError: the directory does not load, has several splits and none is 'train', or lacks text_column (the
            message lists the columns there are).
    """
    import datasets

    try:
        ds = datasets.load_from_disk(source.path)
    except Exception as e:  # noqa: BLE001 - any load failure is a data problem for the user
        raise DataError(
            f"cannot load the saved dataset at {source.path} ({_first_line(e)}); "
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
    return _check_column(ds, source, f"the saved dataset at {source.path}")


def load_table(source: Source):
    """The rows of a table source (table_file / table_dir): ``datasets.load_dataset(source.fmt, data_files=[files],
    split="train", cache_dir=source.cache_dir)``; every file must have the same columns.

    Returns a ``datasets.Dataset`` with ``source.text_column`` among its columns.

    Raises:
        DataError: a file is not valid for its format (or the files' columns differ), or text_column is missing (the
            message lists the columns there are).
    """
    import datasets

    _quiet_datasets()
    where = source.description
    try:
        ds = datasets.load_dataset(source.fmt, data_files=[str(f) for f in source.files], split="train",
                                   cache_dir=source.cache_dir)
    except Exception as e:  # noqa: BLE001 - a file the builder cannot read is the user's to fix
        cause = e.__cause__ or e.__context__
        detail = _first_line(cause if cause is not None and type(e).__name__ == "DatasetGenerationError" else e)
        raise DataError(
            f"cannot read {where} ({detail}); check that {'every file' if len(source.files) > 1 else 'it'} is "
            f"valid {source.fmt}"
            + (" (JSON Lines: one object per line, or one JSON array of objects)" if source.fmt == "json" else "")
            + (" with a header row" if source.fmt == "csv" else "")
            + (" and that all files have the same columns" if len(source.files) > 1 else "")
        ) from None
    return _check_column(ds, source, where)


def hub_offline() -> str | None:
    """The environment variable that puts datasets / huggingface_hub offline (``HF_HUB_OFFLINE`` or
    ``HF_DATASETS_OFFLINE`` set to 1/true/yes/on), or None when neither is."""
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return var
    return None


def hub_unresolvable(endpoint: str | None = None) -> str | None:
    """Why the Hugging Face hub cannot be reached at all -- its host name does not resolve here (no DNS: an
    air-gapped head) -- as a short phrase, or None when it resolves (or no host can be told from the endpoint).

    ``endpoint`` defaults to ``HF_ENDPOINT`` or https://huggingface.co (huggingface_hub's own default). One DNS
    lookup, no connection. huggingface_hub retries a failed request five times with back-off (~24 s) before it
    gives up, so load_hub asks this first and, when the name does not resolve, loads from the datasets cache only.
    """
    url = endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return None
    try:
        socket.getaddrinfo(host, parts.port or (80 if parts.scheme == "http" else 443))
    except OSError as e:
        return f"{host} does not resolve here: {e.strerror or e}"
    return None


def _hub_fix(source: Source) -> str:
    hub = source.hub
    args = ", ".join(repr(a) for a in (hub["repo"], hub["config"]) if a is not None)
    return (f"download it where there is network -- python -c \"import datasets; datasets.load_dataset({args}, "
            f"split={hub['split']!r}).save_to_disk('DIR')\" -- copy DIR to the head and set -e dataset_path=DIR")


def load_hub(source: Source):
    """The rows of a hub source: ``datasets.load_dataset(repo, config, split=split)`` into the datasets cache
    (HF_DATASETS_CACHE); loaded once per Source (kept on it). Needs network, or the split already in the cache.

    Returns a ``datasets.Dataset`` with ``source.text_column`` among its columns.

    Raises:
        DataError: offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set, or no network) with the split not cached, no
            such data set / config / split, or text_column missing (the message lists the columns there are).
    """
    if source.loaded is not None:
        return source.loaded
    unreachable = None
    if hub_offline() is None and "datasets" not in sys.modules:
        unreachable = hub_unresolvable()
        if unreachable is not None:  # read at import: datasets then only looks in its cache, at once
            os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    import datasets

    _quiet_datasets()
    hub = source.hub
    where = f"dataset_path {source.path}"
    try:
        ds = datasets.load_dataset(hub["repo"], hub["config"], split=hub["split"])
    except Exception as e:  # noqa: BLE001 - sorted below into offline / not found / other
        offline = hub_offline()
        text = _first_line(e, 300)
        if unreachable is not None:
            raise DataError(
                f"cannot reach the Hugging Face hub to load {hub['repo']} ({unreachable}) and the split is not in the "
                f"datasets cache ({where}); give the head network access to huggingface.co, or {_hub_fix(source)}"
            ) from None
        if offline is not None:
            raise DataError(
                f"cannot load the hub data set {hub['repo']}: {offline}=1 is set (offline) and it is not in the "
                f"datasets cache ({where}); run prepare_data without HF_HUB_OFFLINE and HF_DATASETS_OFFLINE on a head "
                f"with network, or {_hub_fix(source)}"
            ) from None
        if isinstance(e, ConnectionError) or "Couldn't reach" in text or "ConnectionError" in text:
            raise DataError(
                f"cannot reach the Hugging Face hub to load {hub['repo']} ({text}) ({where}); give the head network "
                f"access to huggingface.co, or {_hub_fix(source)}"
            ) from None
        raise DataError(
            f"cannot load the hub data set {hub['repo']} ({text}) ({where}); check the name, config and split "
            "(hub:REPO_ID[:CONFIG[:SPLIT]], e.g. hub:Salesforce/wikitext:wikitext-2-raw-v1:train); a gated data set "
            "needs HF_TOKEN"
        ) from None
    if isinstance(ds, datasets.DatasetDict):  # not with split=..., but be safe
        ds = ds[hub["split"]]
    _check_column(ds, source, f"the hub data set {hub['repo']} ({where})")
    source.loaded = ds
    return ds


def rows(source: Source):
    """The ``datasets.Dataset`` behind a column source (source.reads_column): load_table, load_saved_dataset or
    load_hub, whose errors (DataError) it raises."""
    if source.kind in ("table_file", "table_dir"):
        return load_table(source)
    if source.kind == "hub":
        return load_hub(source)
    return load_saved_dataset(source)


def documents(source: Source) -> Iterator[str]:
    """Yield the source's documents (non-empty strings), streaming.

    Raises:
        DataError: unreadable / non-UTF-8 text, an unloadable table / saved / hub data set, a missing text_column,
            or a text_column that holds something other than strings.
    """
    if source.kind == "pydoc_topics":
        for name in sorted(_pydoc_topics()):
            yield from _paragraphs(iter(_pydoc_topics()[name].splitlines()))
    elif source.kind in ("text_file", "text_dir"):
        for path in source.files:
            yield from _file_paragraphs(path)
    else:
        ds = rows(source).select_columns([source.text_column])
        for batch in ds.iter(batch_size=1000):
            for text in batch[source.text_column]:
                if isinstance(text, str) and text.strip():
                    yield text
                elif text is not None and not isinstance(text, str):
                    raise DataError(
                        f"column {source.text_column!r} holds {type(text).__name__}, not text ({source.description}); "
                        "set -e text_column= to a string column"
                    )
