"""Which nodes share a directory -- every node's side of the preflight's check (tasks/preflight.yml runs this on every
node with python -c, in three tasks: every node leaves its marker, then every node looks, then every node removes its
own). Stdlib only; run as a program:

    python share_markers.py leave  PREFIX NODE NAME=DIR [NAME=DIR ...]
    python share_markers.py look   PREFIX NODE[,NODE...] NAME=DIR [NAME=DIR ...]
    python share_markers.py remove PREFIX NODE NAME=DIR [NAME=DIR ...]

``leave`` writes ``DIR/PREFIX<NODE>`` (holding NODE) in each DIR that exists; ``look`` looks up the marker of every
NODE given in each DIR and prints one JSON object on stdout, ``{NAME: [the nodes whose marker is there, sorted]}``
(each marker looked up by its name, not by listing the directory: an NFS client may serve a directory listing from
its cache for up to acdirmax seconds, while a name it never looked up is asked of the server); ``remove`` removes
this node's own. Every node leaves before any looks, and looks before any removes (one task each, in step). Two nodes
that see each other's marker in a DIR of the same NAME share it (one NFS or Lustre export, one bind mount). Exit
status 0; 2 on bad arguments.
"""

import json
import os
import sys
import time


def _dirs(pairs):
    out = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"expected NAME=DIR, got {pair!r}")
        out[name] = path
    return out


STALE_S = 3600  # a marker of this node older than this is one an interrupted check left: removed by leave()
STEM = ".dsc-share-"  # every marker's name starts with it (tasks/preflight.yml's prefix: STEM<check's name>.)


def leave(prefix: str, node: str, dirs: dict) -> None:
    """Write ``<dir>/<prefix><node>`` in every directory of ``dirs`` ({name: path}) that exists and is writable
    (the others are left alone: a node that leaves no marker shares nothing), and remove this node's markers of
    checks that ended over STALE_S seconds ago without removing them."""
    for path in dirs.values():
        try:
            for entry in os.scandir(path):
                # STEM<check>.<node>: the check's name has no dot, the node's may
                if entry.name.startswith(STEM) and entry.name[len(STEM):].partition(".")[2] == node and \
                        entry.stat().st_mtime < time.time() - STALE_S:
                    os.remove(entry.path)
        except OSError:
            pass
        try:
            with open(os.path.join(path, prefix + node), "w", encoding="utf-8") as handle:
                handle.write(node + "\n")
        except OSError:
            pass


def look(prefix: str, nodes: list, dirs: dict) -> dict:
    """{name: sorted names of the ``nodes`` whose marker ``<prefix><node>`` is in that directory of ``dirs``}."""
    return {name: sorted(n for n in nodes if os.path.isfile(os.path.join(path, prefix + n)))
            for name, path in dirs.items()}


def remove(prefix: str, node: str, dirs: dict) -> None:
    """Remove this node's markers (those already gone are fine)."""
    for path in dirs.values():
        try:
            os.remove(os.path.join(path, prefix + node))
        except OSError:
            pass


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 4 or argv[0] not in ("leave", "look", "remove"):
        print(__doc__, file=sys.stderr)
        return 2
    what, prefix, node = argv[:3]
    try:
        dirs = _dirs(argv[3:])
    except ValueError as exc:
        print(f"share_markers.py: {exc}", file=sys.stderr)
        return 2
    if what == "leave":
        leave(prefix, node, dirs)
    elif what == "look":
        print(json.dumps(look(prefix, [n for n in node.split(",") if n], dirs)))
    else:
        remove(prefix, node, dirs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
