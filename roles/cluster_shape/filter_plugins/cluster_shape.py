"""Jinja filters of the cluster_shape role: the per-node values of the cluster shape (its defaults/main.yml).

    cluster_shape_addresses: "{{ cluster_shape_nodes | cluster_addresses(hostvars) }}"
    cluster_shape_gpu_indices: "{{ cluster_shape_nodes | cluster_gpu_indices(hostvars) }}"
    cluster_shape_ranks: "{{ cluster_shape_nodes | cluster_ranks(cluster_shape_gpu_indices, hostvars) }}"
    cluster_shape_include: "{{ cluster_shape_nodes | deepspeed_include(cluster_shape_gpu_indices) }}"

``node_vars`` is a mapping of each node's variables, {node: {variable: value}}: ``hostvars`` in the role (each
node's entry is read lazily, only for the variables named here), plain dicts in the tests. A variable a node does not
have is absent from its mapping (Ansible's undefined). Values are converted as the role's templates convert them,
with Jinja's own ``int`` filter and ``sequence`` test.
"""

from __future__ import annotations

from jinja2.filters import do_int
from jinja2.tests import test_sequence


def _text(value):
    """``value | string | trim``: str() of it (a str as is), without surrounding whitespace."""
    return (value if isinstance(value, str) else str(value)).strip()


def cluster_addresses(nodes, node_vars):
    """How the other nodes reach each node: its cluster_address, else its ansible_host, else its name.

    Args:
      nodes: the nodes in hostfile order (cluster_shape_nodes), list of str.
      node_vars: {node: {variable: value}} (hostvars); read: cluster_address, ansible_host.

    Returns:
      {node: address (str, stripped)}, in the order of ``nodes``. A cluster_address that is empty, null or false
      counts as unset; an ansible_host that is set is taken as it is (null -> "None", which cluster_check refuses).
      Raises KeyError when a node is missing from ``node_vars``.

    Example:
      cluster_addresses(["head-1", "worker-1"], {"head-1": {"cluster_address": "10.0.0.1 "},
                                                 "worker-1": {"ansible_host": "192.168.1.2"}})
      -> {"head-1": "10.0.0.1", "worker-1": "192.168.1.2"}
    """
    out = {}
    for node in nodes:
        own = node_vars[node]
        fallback = own["ansible_host"] if "ansible_host" in own else node
        out[node] = _text(own.get("cluster_address") or fallback)
    return out


def address_source(node, node_vars):
    """Where the address the other nodes use for ``node`` comes from (cluster_addresses' rule), as words: "head-1's
    cluster_address", "head-1's ansible_host (cluster_address is not set for it)" or "head-1's inventory name
    (neither cluster_address nor ansible_host is set for it)". ``node_vars``: hostvars."""
    own = node_vars[node]
    if own.get("cluster_address"):
        return "%s's cluster_address" % node
    if "ansible_host" in own:
        return "%s's ansible_host (cluster_address is not set for it)" % node
    return "%s's inventory name (neither cluster_address nor ansible_host is set for it)" % node


def reach_problem(node, node_vars, port, said, src, what="its sshd"):
    """The sentence for ``src`` failing to open a TCP connection to ``node``'s cluster address on ``port``.

    Args:
      node: the node that was not reached; node_vars: hostvars (its address and where it comes from).
      port: the TCP port tried (int or str); said: the check's own message (wait_for's "Timeout when waiting for
        ..."); src: the node that tried; what: what listens on that port, for the message.

    Returns:
      "<src> cannot open a TCP connection to <node> at <address> port <port> (<what>; <said>). <address> is
      <address_source>. <fix>": where the address is not the node's cluster_address, the fix is to set one (an
      ansible_host is often on a management network the other nodes cannot reach); where it is, to check it is on
      the network the nodes share and that no firewall drops that port between them.
    """
    address = cluster_addresses([node], node_vars)[node]
    source = address_source(node, node_vars)
    if node_vars[node].get("cluster_address"):
        fix = ("Check that %s is %s's address on the network the nodes share, and that no firewall drops TCP port %s "
               "between the nodes." % (address, node, port))
    else:
        fix = ("That address is how Ansible reaches %s, which may be a management network the other nodes cannot "
               "reach: set cluster_address: <%s's address on the network the nodes share> for %s in the inventory "
               "(docs/multi-node.md)." % (node, node, node))
    return "%s cannot open a TCP connection to %s at %s port %s (%s; %s). %s is %s. %s" % (
        src, node, address, port, what, str(said).strip(), address, source, fix)


def reach_problems(results, node_vars, src, what="its sshd"):
    """:func:`reach_problem` of every failed item of a registered ``ansible.builtin.wait_for`` loop (``failed`` set, or,
    under ``failed_when: false``, a ``msg`` without the ``state`` of a success), whose items are {"name": node,
    "port": port} (ssh_mesh's peers; cluster_check's master-port check adds one). Returns a list of str, [] when none
    failed."""
    out = []
    for r in results:
        # registered under failed_when: false, a timeout keeps wait_for's msg and has no "state" (a success has)
        if not (r.get("failed") or ("msg" in r and "state" not in r)):
            continue
        out.append(reach_problem(r["item"]["name"], node_vars, r["item"]["port"], r.get("msg", ""), src, what))
    return out


def cluster_gpu_indices(nodes, node_vars):
    """The gpu_indices of each node that sets them, as a list of stripped strings (cluster_check validates them).

    Args:
      nodes: the nodes in hostfile order, list of str.
      node_vars: {node: {variable: value}} (hostvars); read: gpu_indices, a list ([2, 3]) or a comma-separated
        string ("2, 3"); a single number (3) is a one-element list.

    Returns:
      {node: [str, ...]} for the nodes whose gpu_indices is set and not null (others are left out), in the order
      of ``nodes``: "2, 3" -> ["2", "3"], [2, 3] -> ["2", "3"], "" -> [""]. Raises KeyError when a node is missing
      from ``node_vars``.

    Example:
      cluster_gpu_indices(["head-1", "worker-1"], {"head-1": {"gpu_indices": "2, 3"}, "worker-1": {}})
      -> {"head-1": ["2", "3"]}
    """
    out = {}
    for node in nodes:
        raw = node_vars[node].get("gpu_indices")
        if raw is None:
            continue
        items = raw if test_sequence(raw) and not isinstance(raw, str) else str(raw).split(",")
        out[node] = [_text(i) for i in items]
    return out


def cluster_ranks(nodes, gpu_indices, node_vars):
    """Ranks per node: the number of its gpu_indices where it sets them, else its slots.

    Args:
      nodes: the nodes in hostfile order, list of str.
      gpu_indices: the result of cluster_gpu_indices, {node: [str]}.
      node_vars: {node: {variable: value}} (hostvars); read: slots (inventory, or the fact cluster_check sets for a
        CUDA node without it), an int or a string with an integer (" 8 ").

    Returns:
      {node: int}, in the order of ``nodes``. slots that is unset or not a number gives 0 ("2.5" gives 2, as Jinja's
      int filter); cluster_check refuses a node without a positive slot count.

    Example:
      cluster_ranks(["head-1", "worker-1"], {"head-1": ["2", "3"]},
                    {"head-1": {"slots": 8}, "worker-1": {"slots": "4 "}})
      -> {"head-1": 2, "worker-1": 4}
    """
    return {node: len(gpu_indices[node]) if node in gpu_indices
            else do_int(_text(node_vars[node].get("slots", 0))) for node in nodes}


def deepspeed_include(nodes, gpu_indices):
    """DeepSpeed's --include (``host[:i,j]@host...``) when any node sets gpu_indices, else "".

    Args:
      nodes: the nodes in hostfile order, list of str; every one is listed, since --include drops the hosts it does
        not name.
      gpu_indices: the result of cluster_gpu_indices, {node: [str]}; each index as Jinja's int filter reads it (a
        non-number is 0: cluster_check refuses it first).

    Returns:
      str, e.g. "head-1:2,3@worker-1"; "" when ``gpu_indices`` is empty.

    Example:
      deepspeed_include(["head-1", "worker-1"], {"worker-1": ["0", "1"]}) -> "head-1@worker-1:0,1"
    """
    if not gpu_indices:
        return ""
    return "@".join("%s:%s" % (node, ",".join(str(do_int(i)) for i in gpu_indices[node])) if node in gpu_indices
                    else str(node) for node in nodes)


class FilterModule:
    """cluster_addresses, cluster_gpu_indices, cluster_ranks, deepspeed_include."""

    def filters(self):
        return {"cluster_addresses": cluster_addresses, "cluster_gpu_indices": cluster_gpu_indices,
                "cluster_ranks": cluster_ranks, "deepspeed_include": deepspeed_include,
                "address_source": address_source, "reach_problem": reach_problem, "reach_problems": reach_problems}
