"""Log in from the head to every node over ssh at once, as the pdsh launcher will -- the head's side of the preflight's
ssh check (tasks/preflight.yml runs this on the head with python -c). Stdlib only; run as a program:

    python ssh_logins.py HOST [HOST ...]

Runs ``ssh -o BatchMode=yes -o ConnectTimeout=15 HOST true`` for every HOST, at most FANOUT at a time (pdsh's own
default fan-out is 32), so N nodes take about ceil(N / FANOUT) login times instead of N of them (one Ansible loop
item per node, one after another, was ~0.5 s a node: ~8 min at 1,024 nodes). Prints one JSON list on stdout,
``[{"host": HOST, "rc": ssh's exit status, "stderr": its last lines}, ...]`` in the order given; exit status 0.
"""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

FANOUT = 32
SSH = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15"]
TIMEOUT_S = 60  # one login: ConnectTimeout bounds the TCP connection, this the whole exchange


def login(host: str) -> dict:
    """``ssh HOST true`` with BatchMode (no password prompt): {"host", "rc", "stderr"} (rc 255 for ssh's own
    failures, and for a login that took over TIMEOUT_S, whose stderr says so)."""
    try:
        res = subprocess.run([*SSH, host, "true"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"host": host, "rc": 255, "stderr": f"no answer within {TIMEOUT_S} s"}
    return {"host": host, "rc": res.returncode, "stderr": "\n".join(res.stderr.strip().splitlines()[-5:])}


def login_all(hosts: list, fanout: int = FANOUT) -> list:
    """``login`` of every host, at most ``fanout`` at a time; the results in the order of ``hosts``."""
    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(hosts)))) as pool:
        return list(pool.map(login, hosts))


if __name__ == "__main__":
    print(json.dumps(login_all(sys.argv[1:])))
