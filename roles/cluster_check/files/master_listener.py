"""Listen on the master port until every node has connected once, or a time limit passes -- the head's side of the
preflight's master-address check (tasks/preflight.yml: it runs this on the head, async, while every node opens a
TCP connection to the master address with ansible.builtin.wait_for). Stdlib only; run as a program:

    python master_listener.py PORT CONNECTIONS [SECONDS]

Exit status 0 when CONNECTIONS connections came within SECONDS (default 30), 1 when fewer did (it prints how many),
2 when the port cannot be bound (it prints why and, where /proc tells, which process listens there: a run's
rendezvous, another train.yml's check of the same port).
"""

import os
import socket
import sys
import time

#: words of a listener's command line that name what it is (this file's own text is in its `python -c` line)
KNOWN = ((b"master_listener", "another train.yml's preflight check of the master port"),)


def listen(port: int, want: int, seconds: float = 30.0) -> int:
    """Accept up to ``want`` TCP connections on ``port`` (all addresses) within ``seconds``; return how many came.

    Each connection is closed after the peer closes it (or after 5 s), so no TIME_WAIT is left on the port on this
    side: torch's rendezvous binds it next. Raises OSError when the port cannot be bound.
    """
    until = time.monotonic() + seconds
    got = 0
    with socket.create_server(("", port), reuse_port=False) as srv:
        srv.settimeout(1)
        while got < want and time.monotonic() < until:
            try:
                conn, _ = srv.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(1)  # the peer closes first
                except OSError:
                    pass
            got += 1
    return got


def port_holder(port: int, proc: str = "/proc") -> str | None:
    """Which process listens on TCP ``port`` in this network namespace: ``"pid N (<what>)"``, <what> a known
    listener's name (KNOWN) or its command line (200 characters at most); None when /proc does not tell (no such
    listener, or one of another user's processes that cannot be read).

    The listening sockets' inodes come from ``/proc/net/tcp`` and ``tcp6`` (state 0A: LISTEN; the local port in
    hex), their owner from the ``socket:[inode]`` links of ``/proc/<pid>/fd``."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", table)) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == int(port):
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    for pid in sorted((p for p in os.listdir(proc) if p.isdigit()), key=int):
        fds = os.path.join(proc, pid, "fd")
        try:
            links = {os.readlink(os.path.join(fds, fd)) for fd in os.listdir(fds)}
        except OSError:
            continue
        if links & inodes:
            try:
                with open(os.path.join(proc, pid, "cmdline"), "rb") as f:
                    cmdline = f.read()
            except OSError:
                cmdline = b""
            words = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()[:200]
            return f"pid {pid} ({next((name for word, name in KNOWN if word in cmdline), words)})"
    return None


def main(argv: list[str]) -> int:
    port, want = int(argv[0]), int(argv[1])
    seconds = float(argv[2]) if len(argv) > 2 else 30.0
    try:
        got = listen(port, want, seconds)
    except OSError as e:
        holder = port_holder(port)
        print(f"cannot listen on port {port}: {e.strerror or e}" + (f"; {holder} listens there" if holder else ""))
        return 2
    if got < want:
        print(f"{got} of {want} nodes connected to port {port} within {seconds:g} s")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
