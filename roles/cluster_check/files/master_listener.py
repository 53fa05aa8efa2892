"""Listen on the master port until every node has connected once, or a time limit passes -- the head's side of the
preflight's master-address check (tasks/preflight.yml: it runs this on the head, async, while every node opens a
TCP connection to the master address with ansible.builtin.wait_for). Stdlib only; run as a program:

    python master_listener.py PORT CONNECTIONS [SECONDS]

Exit status 0 when CONNECTIONS connections came within SECONDS (default 30), 1 when fewer did (it prints how many),
2 when the port cannot be bound (it prints why: e.g. a run's rendezvous already listens there).
"""

import socket
import sys
import time


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


def main(argv: list[str]) -> int:
    port, want = int(argv[0]), int(argv[1])
    seconds = float(argv[2]) if len(argv) > 2 else 30.0
    try:
        got = listen(port, want, seconds)
    except OSError as e:
        print(f"cannot listen on port {port}: {e.strerror or e}")
        return 2
    if got < want:
        print(f"{got} of {want} nodes connected to port {port} within {seconds:g} s")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
