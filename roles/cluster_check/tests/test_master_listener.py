"""roles/cluster_check/files/master_listener.py, run as the preflight runs it (``python -c <its text> PORT N``): it
counts real TCP connections on a real port, ends when all came, and says when some did not or the port is taken."""
import socket
import subprocess
import sys
import time
from pathlib import Path

PROGRAM = (Path(__file__).resolve().parents[1] / "files" / "master_listener.py").read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def start(port: int, want: int, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, str(port), str(want), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    return proc


def connect(port: int, timeout: float = 10.0) -> None:
    """One connection as wait_for makes it: connect (retrying until the listener is up), then close."""
    until = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > until:
                raise
            time.sleep(0.05)


def test_it_ends_as_soon_as_every_node_connected():
    port = free_port()
    proc = start(port, 3, 30)
    for _ in range(3):
        connect(port)
    out, _ = proc.communicate(timeout=15)  # long before its 30 s
    assert proc.returncode == 0, out
    # the port is free again at once for torch's rendezvous
    with socket.create_server(("", port), reuse_port=False):
        pass


def test_fewer_connections_than_nodes_end_at_the_time_limit_saying_how_many():
    port = free_port()
    proc = start(port, 2, 2)
    connect(port)
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 1
    assert out.strip() == f"1 of 2 nodes connected to port {port} within 2 s"


def test_a_port_already_taken_is_said():
    with socket.create_server(("", 0)) as taken:
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-c", PROGRAM, str(port), "1", "1"], capture_output=True, text=True,
                              timeout=15)
    assert proc.returncode == 2
    assert proc.stdout.startswith(f"cannot listen on port {port}: "), proc.stdout
    assert "Traceback" not in proc.stderr



def test_a_port_held_by_another_listener_names_it():
    """Two listeners on one port, as two train.yml checking the same master port at once: the second cannot bind
    and says the first one holds the port (its pid, and what it is), not that a node could not connect."""
    port = free_port()
    first = start(port, 2, 10)
    try:
        connect(port)  # the first listens: one of its two connections
        second = subprocess.run([sys.executable, "-c", PROGRAM, str(port), "1", "1"], capture_output=True,
                                text=True, timeout=15)
        connect(port)  # the first one's second: it ends
    finally:
        first.communicate(timeout=15)
    assert second.returncode == 2, second.stdout
    assert second.stdout.strip().endswith(
        f"; pid {first.pid} (another train.yml's preflight check of the master port) listens there"), second.stdout
