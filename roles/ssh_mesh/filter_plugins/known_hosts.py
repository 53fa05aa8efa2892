"""Jinja filter of the ssh_mesh role: the known_hosts entries of the head from ssh-keyscan's answers.

    loop: "{{ __ssh_mesh_keyscan.results | known_hosts_entries }}"   (roles/ssh_mesh/tasks/known_hosts.yml)

ssh checks a host key under the name it connects to, written ``[name]:port`` for a port other than 22; each node is
reached by its inventory name, its cluster address, its ansible_host and its other names, so each gets every key.
"""

from __future__ import annotations

from jinja2.filters import do_int


def _unique(names):
    """``names`` without repeats, first one kept, strings compared without case (as Ansible's ``unique`` filter)."""
    seen, out = set(), []
    for name in names:
        key = name.lower() if isinstance(name, str) else name
        if key not in seen:
            seen.add(key)
            out.append(name)
    return out


def known_hosts_entries(scans):
    """[host name as ssh writes it, "<key type> <key>"] for every name of every node and every key it answered.

    Args:
      scans: the ``results`` of the registered ssh-keyscan loop, list of dict: ``item`` (the peer, a node's
        _ssh_mesh_self: name, address, port, aliases (list of str), ansible_host (optional, default: name)) and
        ``stdout_lines`` (ssh-keyscan's lines, "<host> <type> <key>"; comment lines start with "#").

    Returns:
      list of [name, key]: per scan in order, per name (name, address, ansible_host, aliases; a repeat left out,
      also one that differs only in case), per key line in order (comment and empty lines left out). name is
      "[<name>]:<port>" when port (int or digit string, read as Jinja's int filter reads it) is not 22. [] when
      no scan has a key line.
      Raises KeyError when a scan lacks item, stdout_lines or a peer field other than ansible_host.

    Example:
      known_hosts_entries([{"item": {"name": "w1", "address": "10.0.0.2", "port": 2222, "aliases": []},
                            "stdout_lines": ["# 10.0.0.2:2222 SSH-2.0", "10.0.0.2 ssh-ed25519 AAAA"]}])
      -> [["[w1]:2222", "ssh-ed25519 AAAA"], ["[10.0.0.2]:2222", "ssh-ed25519 AAAA"]]
    """
    out = []
    for scan in scans:
        peer = scan["item"]
        keys = [" ".join(line.split()[1:3]) for line in scan["stdout_lines"] if line and not line.startswith("#")]
        for name in _unique([peer["name"], peer["address"], peer.get("ansible_host", peer["name"])]
                            + list(peer["aliases"])):
            host = name if do_int(peer["port"]) == 22 else "[%s]:%s" % (name, peer["port"])
            out.extend([host, key] for key in keys)
    return out


class FilterModule:
    """known_hosts_entries."""

    def filters(self):
        return {"known_hosts_entries": known_hosts_entries}
