"""Jinja filters of the cuda role over its support matrix (``_cuda_support``, roles/cuda/vars/main.yml), for the
refusal messages of tasks/preflight.yml and tasks/preinstalled.yml.

    _cuda_alternatives: "{{ _cuda_support | cuda_alternatives(_cuda_os_key) }}"
    _cuda_where_version: "{{ _cuda_support | cuda_where_version(cuda_version) }}"

The matrix is ``{source: {os key: [version "major.minor", or "*" for any]}}``; the os key "*" means any OS.
"""

from __future__ import annotations


def cuda_alternatives(support, os_key):
    """Every source that works on ``os_key``, with its versions there.

    Args:
      support: the support matrix, {source: {os key: [version]}}.
      os_key: this node's OS key (_cuda_os_key), e.g. "debian12".

    Returns:
      str: "cuda_source=<source> (<versions, comma-separated>)" per source that lists ``os_key`` or "*", joined
      with "; " in the matrix's order; a version "*" reads "any version". "none" when no source fits.

    Example:
      cuda_alternatives({"nvidia": {"debian12": ["12.2", "12.3"]}, "preinstalled": {"*": ["*"]}}, "debian12")
      -> "cuda_source=nvidia (12.2, 12.3); cuda_source=preinstalled (any version)"
    """
    out = []
    for source, oses in support.items():
        if os_key in oses or "*" in oses:
            versions = oses.get(os_key, oses.get("*"))
            listed = ", ".join(str(v) for v in versions).replace("*", "any version")
            out.append("cuda_source=%s (%s)" % (source, listed))
    return "; ".join(out) if out else "none"


def cuda_where_version(support, cuda_version):
    """Where NVIDIA's repository or a distribution packages ``cuda_version``.

    Args:
      support: the support matrix, {source: {os key: [version]}}.
      cuda_version: the inventory's cuda_version, compared as a string (str(12.6) is "12.6").

    Returns:
      str: "<os key> with cuda_source=<source>" per os key whose list has the version (the source "preinstalled"
      left out: it packages nothing), joined with ", " in the matrix's order; "nowhere (not a known CUDA release)"
      when none has it.

    Example:
      cuda_where_version({"nvidia": {"debian12": ["12.2"], "rhel9": ["11.8", "12.2"]},
                          "distro": {"debian12": ["11.8"]}}, "11.8")
      -> "rhel9 with cuda_source=nvidia, debian12 with cuda_source=distro"
    """
    version = cuda_version if isinstance(cuda_version, str) else str(cuda_version)
    out = ["%s with cuda_source=%s" % (os_key, source) for source, oses in support.items() if source != "preinstalled"
           for os_key, versions in oses.items() if version in versions]
    return ", ".join(out) if out else "nowhere (not a known CUDA release)"


class FilterModule:
    """cuda_alternatives, cuda_where_version."""

    def filters(self):
        return {"cuda_alternatives": cuda_alternatives, "cuda_where_version": cuda_where_version}
