"""roles/ssh_mesh/filter_plugins/known_hosts.py: the head's known_hosts entries from ssh-keyscan's answers, called
directly on results shaped like the registered loop of tasks/known_hosts.yml."""

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "ssh_mesh_known_hosts", Path(__file__).resolve().parents[1] / "filter_plugins" / "known_hosts.py")
known_hosts = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(known_hosts)


def scan(name, address, port=22, aliases=(), lines=None, **peer):
    """One item of the keyscan loop's results: the peer (a node's _ssh_mesh_self) and what ssh-keyscan printed."""
    if lines is None:
        lines = ["# %s:%s SSH-2.0-OpenSSH_9.2p1" % (address, port), "%s ssh-ed25519 AAAAC3-%s" % (address, name),
                 "%s ecdsa-sha2-nistp256 AAAAE2-%s" % (address, name)]
    return {"item": dict(peer, name=name, address=address, port=port, aliases=list(aliases)), "stdout_lines": lines,
            "changed": False}


def test_port_22_every_name_gets_every_key_comments_left_out():
    entries = known_hosts.known_hosts_entries([scan("head-1", "10.0.0.1", ansible_host="mgmt-1",
                                                    aliases=["head-1.lan"])])
    assert entries == [[host, key] for host in ["head-1", "10.0.0.1", "mgmt-1", "head-1.lan"]
                       for key in ["ssh-ed25519 AAAAC3-head-1", "ecdsa-sha2-nistp256 AAAAE2-head-1"]]


@pytest.mark.parametrize("port", [2222, "2222"])
def test_another_port_is_written_in_brackets(port):
    entries = known_hosts.known_hosts_entries([scan("worker-1", "10.0.0.2", port=port,
                                                    lines=["10.0.0.2 ssh-ed25519 AAAA"])])
    assert entries == [["[worker-1]:2222", "ssh-ed25519 AAAA"], ["[10.0.0.2]:2222", "ssh-ed25519 AAAA"]]


def test_port_22_as_a_string_is_plain():
    assert known_hosts.known_hosts_entries([scan("w", "10.0.0.2", port="22", lines=["x ssh-rsa KEY"])]) == \
        [["w", "ssh-rsa KEY"], ["10.0.0.2", "ssh-rsa KEY"]]


def test_without_ansible_host_the_name_stands_for_it_and_repeats_count_once():
    # ansible_host absent -> the name; the alias equal to the address and one differing only in case are repeats
    entries = known_hosts.known_hosts_entries([scan("worker-1", "10.0.0.2", aliases=["10.0.0.2", "WORKER-1", "w1"],
                                                    lines=["10.0.0.2 ssh-ed25519 K"])])
    assert entries == [["worker-1", "ssh-ed25519 K"], ["10.0.0.2", "ssh-ed25519 K"], ["w1", "ssh-ed25519 K"]]


def test_only_the_type_and_key_of_a_line_are_kept():
    lines = ["", "#comment", "10.0.0.3 ssh-ed25519 AAAA trailing words", "10.0.0.3 ssh-rsa"]
    assert known_hosts.known_hosts_entries([scan("w2", "10.0.0.3", lines=lines)]) == \
        [["w2", "ssh-ed25519 AAAA"], ["w2", "ssh-rsa"], ["10.0.0.3", "ssh-ed25519 AAAA"], ["10.0.0.3", "ssh-rsa"]]


def test_several_nodes_keep_their_order_and_their_own_keys():
    entries = known_hosts.known_hosts_entries([
        scan("head-1", "10.0.0.1", lines=["10.0.0.1 ssh-ed25519 H"]),
        scan("worker-1", "10.0.0.2", port=2200, ansible_host="10.0.0.2", lines=["10.0.0.2 ssh-ed25519 W"])])
    assert entries == [["head-1", "ssh-ed25519 H"], ["10.0.0.1", "ssh-ed25519 H"],
                       ["[worker-1]:2200", "ssh-ed25519 W"], ["[10.0.0.2]:2200", "ssh-ed25519 W"]]


def test_no_scan_or_no_key_gives_no_entry():
    assert known_hosts.known_hosts_entries([]) == []
    assert known_hosts.known_hosts_entries([scan("w", "10.0.0.4", lines=["# 10.0.0.4:22 SSH-2.0", ""])]) == []


def test_a_scan_without_its_output_is_an_error():
    with pytest.raises(KeyError):
        known_hosts.known_hosts_entries([{"item": {"name": "w", "address": "a", "port": 22, "aliases": []}}])


def test_the_filters_are_registered_under_their_names():
    assert known_hosts.FilterModule().filters() == {"known_hosts_entries": known_hosts.known_hosts_entries,
                                                    "changed_host_keys": known_hosts.changed_host_keys}


def _keypair(tmp_path, name):
    """A real ed25519 public key (ssh-keygen) -> (blob, ssh-keygen -l's SHA256 fingerprint)."""
    import subprocess

    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    blob = path.with_suffix(".pub").read_text().split()[1]
    fp = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(path) + ".pub"], check=True,
                        capture_output=True, text=True).stdout.split()[1]
    return blob, fp


def test_a_changed_key_is_found_under_every_name_with_real_fingerprints_and_a_new_node_is_not(tmp_path):
    import subprocess

    old, old_fp = _keypair(tmp_path, "old")
    new, new_fp = _keypair(tmp_path, "new")
    assert known_hosts.fingerprint(old) == old_fp  # the fingerprint ssh-keygen -l prints
    # the head trusted worker-1's old key under its name and address (port 2222), and head-1's key; worker-2 is new
    (tmp_path / "known_hosts").write_text(
        f"[worker-1]:2222 ssh-ed25519 {old}\n[10.0.0.2]:2222 ssh-ed25519 {old}\n# a comment\n"
        f"head-1 ssh-ed25519 {new}\n@revoked * ssh-ed25519 {new}\n")
    text = (tmp_path / "known_hosts").read_text()
    w1 = scan("worker-1", "10.0.0.2", port=2222, lines=[f"10.0.0.2 ssh-ed25519 {new}"])
    head = scan("head-1", "10.0.0.1", lines=[f"10.0.0.1 ssh-ed25519 {new}"])
    w2 = scan("worker-2", "10.0.0.3", lines=[f"10.0.0.3 ssh-ed25519 {old}"])
    changed = known_hosts.changed_host_keys([head, w1, w2], text)
    assert changed == [{"node": "worker-1", "host": host, "type": "ssh-ed25519", "old": old_fp, "new": new_fp,
                        "text": f"{host} ssh-ed25519 {old_fp} -> {new_fp}"} for host in ("[worker-1]:2222",
                                                                                        "[10.0.0.2]:2222")]
    assert known_hosts.changed_host_keys([head, w1, w2], "") == []  # no known_hosts yet: every key is new
    # hashed names (ssh-keygen -H, HashKnownHosts) are matched too
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(tmp_path / "known_hosts")], check=True, capture_output=True)
    hashed = (tmp_path / "known_hosts").read_text()
    assert "worker-1" not in hashed and "|1|" in hashed
    assert known_hosts.changed_host_keys([w1], hashed) == changed
