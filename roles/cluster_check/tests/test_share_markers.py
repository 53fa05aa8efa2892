"""roles/cluster_check/files/share_markers.py, run as the preflight runs it (``python -c <source>``): three "nodes",
two of which have one directory (as an NFS export mounted on both) and one its own."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

SOURCE = (Path(__file__).resolve().parents[1] / "files" / "share_markers.py").read_text()
PREFIX = ".dsc-share-1733400000-5f3a."


def marker(what, *args):
    proc = subprocess.run([sys.executable, "-c", SOURCE, what, *args], capture_output=True, text=True, check=False)
    return proc


def test_nodes_that_share_a_directory_see_each_others_marker_and_none_is_left(tmp_path):
    shared, own, runs = tmp_path / "shared", tmp_path / "own", tmp_path / "runs"
    for d in (shared, own, runs):
        d.mkdir()
    dirs = {"head-1": shared, "worker-1": shared, "worker-2": own}
    nodes = ",".join(dirs)
    for node, d in dirs.items():  # every node leaves its marker before any looks
        assert marker("leave", PREFIX, node, f"local_ssd_dir={d}", f"runs_dir={runs}/{node}").returncode == 0
    seen = {}
    for node, d in dirs.items():
        proc = marker("look", PREFIX, nodes, f"local_ssd_dir={d}", f"runs_dir={runs}/{node}")
        assert proc.returncode == 0, proc.stderr
        seen[node] = json.loads(proc.stdout)
    # a runs_dir that does not exist holds no marker and is no error
    assert seen == {"head-1": {"local_ssd_dir": ["head-1", "worker-1"], "runs_dir": []},
                    "worker-1": {"local_ssd_dir": ["head-1", "worker-1"], "runs_dir": []},
                    "worker-2": {"local_ssd_dir": ["worker-2"], "runs_dir": []}}
    for node, d in dirs.items():
        assert marker("remove", PREFIX, node, f"local_ssd_dir={d}").returncode == 0
    assert list(shared.iterdir()) == [] and list(own.iterdir()) == []


def test_another_checks_markers_and_bad_arguments():
    proc = marker("look", PREFIX, "head-1", "local_ssd_dir")
    assert proc.returncode == 2 and "expected NAME=DIR, got 'local_ssd_dir'" in proc.stderr
    assert marker("peek", PREFIX, "head-1", "x=/tmp").returncode == 2


def test_markers_of_other_checks_are_not_seen_and_this_nodes_old_ones_go(tmp_path):
    """A check reads only its own markers; leave() removes the node's own markers that an interrupted check left
    over an hour ago, and no other node's, nor a recent one (a check beside this one)."""
    old, recent, other, dotted = (tmp_path / ".dsc-share-1-a.worker-9", tmp_path / ".dsc-share-2-b.worker-9",
                                  tmp_path / ".dsc-share-1-a.worker-8", tmp_path / ".dsc-share-1-a.gpu1.worker-9")
    for path in (old, recent, other, dotted):
        path.write_text("x\n")
    for path in (old, other, dotted):
        os.utime(path, (time.time() - 7200, time.time() - 7200))
    proc = marker("look", PREFIX, "head-1,worker-9", f"local_ssd_dir={tmp_path}")
    assert json.loads(proc.stdout) == {"local_ssd_dir": []}
    assert marker("leave", PREFIX, "worker-9", f"local_ssd_dir={tmp_path}").returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([recent.name, other.name, dotted.name,
                                                                 PREFIX + "worker-9"])
