"""A prepared-data artifact directory: MANIFEST (sha256 of every file, written last) and atomic publishing.

Layout (docs/developers/architecture.md, "What flows between the sites"): ARTIFACT/tokenizer/, ARTIFACT/dataset/,
ARTIFACT/prepare.json, ARTIFACT/MANIFEST.
The checkpoint a run resumes from is staged onto the nodes the same way (roles/train_stage, resume.yml): the head
writes a MANIFEST into its copy, and every worker's copy is checked against it.
MANIFEST has one line per file, ``<sha256>  <relative path>`` (sha256sum's format, so ``sha256sum -c MANIFEST``
works inside the directory), sorted by path, MANIFEST itself excluded. A directory that must hold nothing but its
own files (a user script's data, which the script may read whole) keeps its MANIFEST beside it instead
(``manifest_path``: ``<dir>.MANIFEST``); the functions below take that path as ``manifest``.

An artifact is built in a temporary directory beside its final place and moved there with os.replace, so a reader
never sees a half-written one: either the old artifact, or the complete new one.

Verifying hashes every byte (sha256 runs at ~500 MB/s a core; ``hash_files`` hashes up to HASH_THREADS files at
once, so a corpus of many files or a checkpoint of many shards goes at up to the disk's rate), on the head and on
every worker, at every run. So a verification that passed leaves a stamp beside the artifact
(``.<name>.verified.json``: the MANIFEST's sha256 and every file's size and mtime in ns); ``verify`` with
``quick=True`` accepts the artifact without hashing when nothing of that changed (rsync's "quick check": a file
rewritten, appended to, truncated, added or removed changes it), and hashes everything otherwise. The stamp is
outside the directory, so staging copies never carry it to another node: each node stamps what it verified itself.

Stdlib only, so the Ansible controller or a staging check can use it without the training venv.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MANIFEST = "MANIFEST"
RACY_NS = 2_000_000_000  # files modified this close to their hashing are hashed again (coarse mtimes, FAT's 2 s)
_CHUNK = 1 << 20
#: files hashed at once (threads): enough to keep an NVMe disk busy, few enough not to thrash a spinning one
HASH_THREADS = max(1, min(8, os.cpu_count() or 1))


def sha256_file(path: Path) -> str:
    """sha256 of a file's bytes as 64 hex chars (read in 1 MiB chunks); the one file hash of train/ (MANIFEST,
    corpus fingerprints). Raises OSError when the file can't be read."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(root: Path, manifest: Path | None = None) -> list[str]:
    """Every file under ``root``, relative, sorted; root/MANIFEST left out unless the MANIFEST is ``manifest``,
    elsewhere."""
    inside = manifest is None or Path(manifest) == Path(root) / MANIFEST
    out = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            if rel != MANIFEST or not inside:
                out.append(rel)
    return sorted(out)


def manifest_path(root: Path, beside: bool = False) -> Path:
    """Where ``root``'s MANIFEST is: ``root/MANIFEST``, or with ``beside`` the file ``<root>.MANIFEST`` next to it."""
    root = Path(root)
    return root.parent / f"{root.name}.{MANIFEST}" if beside else root / MANIFEST


def hash_files(root: Path, rels: list[str]) -> list[str]:
    """sha256 (``sha256_file``) of each ``root/rel``, in the order of ``rels``, hashed HASH_THREADS files at a time:
    hashlib releases the GIL while it hashes, so a checkpoint of many shards (or a data set of many files) is hashed
    at the disk's rate rather than one core's (~500 MB/s). Raises OSError when a file can't be read."""
    root = Path(root)
    if len(rels) < 2:
        return [sha256_file(root / rel) for rel in rels]
    with ThreadPoolExecutor(max_workers=HASH_THREADS) as pool:
        return list(pool.map(lambda rel: sha256_file(root / rel), rels))


def write_manifest(root: Path, manifest: Path | None = None) -> Path:
    """Hash every file under root (``hash_files``) and write its MANIFEST (call this last): root/MANIFEST, or the
    file ``manifest`` (outside ``root``). Returns the MANIFEST's path."""
    root = Path(root)
    target = Path(manifest) if manifest is not None else root / MANIFEST
    rels = _files(root, target)
    lines = [f"{digest}  {rel}\n" for digest, rel in zip(hash_files(root, rels), rels)]
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(lines)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    return target


def write_stamp(stamp: Path, data: dict) -> None:
    """Write a quick-check stamp (JSON) by rename; an unwritable place is ignored: the next run hashes again."""
    stamp = Path(stamp)
    tmp = stamp.with_name(stamp.name + ".tmp")
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, stamp)
    except OSError:
        pass


def stamp_path(root: Path) -> Path:
    """Where ``verify`` records a passed verification of ``root``: ``<parent>/.<name>.verified.json``."""
    root = Path(root)
    return root.parent / f".{root.name}.verified.json"


def _state(root: Path, manifest: Path) -> dict | None:
    """The MANIFEST's sha256 and every file's [size, mtime_ns] under ``root`` (None when MANIFEST is unreadable)."""
    try:
        files = {rel: [(st := (root / rel).stat()).st_size, st.st_mtime_ns] for rel in _files(root, manifest)}
        return {"manifest_sha256": sha256_file(manifest), "files": files}
    except OSError:
        return None


def verify(root: Path, quick: bool = False, manifest: Path | None = None) -> tuple[bool, str]:
    """(ok, reason). ok only when MANIFEST exists, every listed file has its hash, and no file is unlisted.

    With ``quick``, an artifact whose MANIFEST, file names, sizes and mtimes are those recorded by the last passed
    verification (``stamp_path``) is ok without hashing (reason ``N files unchanged since verified ...``), unless a
    file's mtime was within 2 s of that verification's start: a file rewritten within the file system's timestamp
    granularity could keep its mtime ("racy git"), so it is hashed. Every passed full verification writes that
    stamp (atomically); a failed one removes it. ``manifest``: the MANIFEST's path where it is not root/MANIFEST."""
    root = Path(root)
    manifest = Path(manifest) if manifest is not None else root / MANIFEST
    stamp = stamp_path(root)
    if quick and root.is_dir() and manifest.is_file():
        try:
            recorded = json.loads(stamp.read_text(encoding="utf-8"))
            started = recorded.pop("verified_at_ns")
        except (OSError, ValueError, KeyError, AttributeError):
            recorded = None
        if recorded is not None and recorded == _state(root, manifest) and isinstance(started, int) and all(
                mtime < started - RACY_NS for _size, mtime in recorded["files"].values()):
            return True, (f"{len(recorded['files'])} files unchanged since verified (MANIFEST, sizes, mtimes; "
                          f"{stamp.name})")
    started = time.time_ns()
    ok, why = _verify_hashes(root, manifest)
    if ok:
        state = _state(root, manifest)
        if state is not None:
            write_stamp(stamp, dict(state, verified_at_ns=started))
    else:
        try:
            stamp.unlink()
        except OSError:
            pass
    return ok, why


def _verify_hashes(root: Path, manifest: Path) -> tuple[bool, str]:
    if not root.is_dir():
        return False, "not a directory"
    if not manifest.is_file():
        return False, f"{manifest} is missing (never written, or a copy cut off before it)"
    listed: dict[str, str] = {}
    for n, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or not rel:
            return False, f"{manifest} line {n} is malformed"
        listed[rel] = digest
    present = set(_files(root, manifest))
    extra = sorted(present - set(listed))
    if extra:
        return False, f"file not in MANIFEST: {extra[0]}" + (f" (+{len(extra) - 1} more)" if len(extra) > 1 else "")
    missing = [rel for rel in listed if rel not in present]
    if missing:
        return False, f"file listed in MANIFEST is missing: {missing[0]}"
    rels = list(listed)
    for rel, digest in zip(rels, hash_files(root, rels)):
        if digest != listed[rel]:
            return False, f"sha256 mismatch: {rel}"
    return True, f"{len(listed)} files verified"


def staging_dir(final: Path) -> Path:
    """A fresh temporary directory beside ``final`` (same filesystem, so os.replace is atomic)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    os.chmod(staged, 0o755)  # mkdtemp makes it 0700; the artifact is read by the training user on every node
    return staged


def publish(staged: Path, final: Path) -> None:
    """Move a complete staged artifact into place, replacing an old one (moved aside first, then removed)."""
    staged, final = Path(staged), Path(final)
    old = None
    if final.exists() or final.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
        os.replace(final, old / final.name)
    os.replace(staged, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
