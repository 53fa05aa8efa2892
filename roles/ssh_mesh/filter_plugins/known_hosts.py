"""Jinja filters of the ssh_mesh role: the known_hosts entries of the head from ssh-keyscan's answers, and the keys
among them that differ from the ones the head already trusts.

    loop: "{{ __ssh_mesh_keyscan.results | known_hosts_entries }}"   (roles/ssh_mesh/tasks/known_hosts.yml)
    "{{ __ssh_mesh_keyscan.results | changed_host_keys(known_hosts_text) }}"

ssh checks a host key under the name it connects to, written ``[name]:port`` for a port other than 22; each node is
reached by its inventory name, its cluster address, its ansible_host and its other names, so each gets every key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

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


def fingerprint(key):
    """ssh-keygen -l's SHA256 fingerprint of a public key blob (base64 text): "SHA256:<base64 of the digest, no
    padding>"; the text itself when it is not base64."""
    try:
        blob = base64.b64decode(key, validate=True)
    except (ValueError, TypeError):
        return key
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _names_match(field, host):
    """Whether a known_hosts line's host field (comma-separated names or patterns' plain names, or one hashed name
    ``|1|salt|hash``) names ``host`` (compared without case, as ssh does for plain names)."""
    if field.startswith("|1|"):
        try:
            _, _, salt, digest = field.split("|")
            mac = hmac.new(base64.b64decode(salt), host.encode(), hashlib.sha1).digest()
        except (ValueError, TypeError):
            return False
        return hmac.compare_digest(mac, base64.b64decode(digest))
    return host.lower() in (name.lower() for name in field.split(","))


def trusted_keys(known_hosts_text, host):
    """{key type: key blob} the known_hosts text holds for ``host`` (a name as ssh writes it, "[name]:port" for a
    port other than 22); comment lines, @cert-authority and @revoked lines are left out."""
    found = {}
    for line in (known_hosts_text or "").splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[0].startswith("#") or fields[0].startswith("@"):
            continue
        if _names_match(fields[0], host):
            found.setdefault(fields[1], fields[2])
    return found


def changed_host_keys(scans, known_hosts_text):
    """The host keys ssh-keyscan got now that differ from the key of the same type known_hosts trusts for that name.

    Args:
      scans: the registered ssh-keyscan loop's ``results`` (as for :func:`known_hosts_entries`).
      known_hosts_text: the head's known_hosts file as text ("" when there is none yet: every key is new, none
        changed).

    Returns:
      list of {"node": the inventory name, "host": the name in known_hosts, "type": key type, "old": SHA256
      fingerprint trusted, "new": SHA256 fingerprint scanned, "text": "<host> <type> <old> -> <new>"}, in the order
      of the entries; a name or key type known_hosts does not hold yet is new, not changed, and is not listed.
    """
    out = []
    for scan in scans:
        for host, key in known_hosts_entries([scan]):
            ktype, blob = key.split()[:2]
            old = trusted_keys(known_hosts_text, host).get(ktype)
            if old is not None and old != blob:
                was, now = fingerprint(old), fingerprint(blob)
                out.append({"node": scan["item"]["name"], "host": host, "type": ktype, "old": was, "new": now,
                            "text": f"{host} {ktype} {was} -> {now}"})
    return out


class FilterModule:
    """known_hosts_entries, changed_host_keys."""

    def filters(self):
        return {"known_hosts_entries": known_hosts_entries, "changed_host_keys": changed_host_keys}
