"""Each torch line's lock (roles/torch_matrix/defaults/main.yml) against the packages' own metadata on PyPI.

For every line, pip resolves the line's torch, every pin and its DeepSpeed release together, as one install, from
the package index (``pip install --dry-run --ignore-installed --report``: PyPI serves each wheel's METADATA on its
own, PEP 658, so nothing big is downloaded; DeepSpeed's source distribution is fetched and its metadata built).
Then, from the metadata pip read:
  * every pin resolved to exactly its version (nothing in the lock is overruled by another package's bounds);
  * every Requires-Dist of a pinned package on another pinned package (torch, numpy, transformers, ...), with its
    marker evaluated for the node (the line's Python, Linux x86_64) and for the ``torch`` extra, is satisfied by
    the line's pin (``packaging`` specifiers);
  * the line's ``python`` is the highest Requires-Python floor of its pins, and every pin accepts it.
A lock that cannot install together is red here. The current line's real install is the provisioned venv
(make provision; roles/python_env molecule). DSC_OFFLINE=1 skips these tests (no package index).
"""

import json
import os
import subprocess
import sys

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

with open(os.path.join(REPO, "roles", "torch_matrix", "defaults", "main.yml")) as _f:
    LINES = yaml.safe_load(_f)["torch_matrix_lines"]

pytestmark = [pytest.mark.slow,  # pip resolves every lock against the package index (test tiers: pytest.ini)
              pytest.mark.skipif(os.environ.get("DSC_OFFLINE") == "1", reason="DSC_OFFLINE=1: no package index")]


def pins_of(line):
    """{canonical name: version} of the line's torch, packages and deepspeed."""
    pins = {"torch": str(line["torch"]), "deepspeed": str(line["deepspeed"])}
    for spec in line["packages"]:
        req = Requirement(spec)
        (op, version), = [(s.operator, s.version) for s in req.specifier]
        assert op == "==", "%s: a lock pins with ==" % spec
        pins[canonicalize_name(req.name)] = version
    return pins


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory):
    """{line name: (pip process, report path)}: every line's resolution started at once (each waits on the package
    index most of its time), read by ``resolved``."""
    started = {}
    for name in sorted(LINES):
        report = tmp_path_factory.mktemp("lock") / "report.json"
        reqs = ["%s==%s" % pin for pin in pins_of(LINES[name]).items()]
        started[name] = (subprocess.Popen([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                                           "--quiet", "--disable-pip-version-check", "--report", str(report), *reqs],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), report)
    yield started
    for proc, _ in started.values():
        if proc.poll() is None:
            proc.kill()


@pytest.fixture(scope="module", params=sorted(LINES))
def resolved(request, resolutions):
    """(line, pins, {canonical name: metadata dict from pip's installation report})."""
    line = LINES[request.param]
    pins = pins_of(line)
    proc, report = resolutions[request.param]
    _, err = proc.communicate(timeout=900)
    stderr = "\n".join(l for l in err.splitlines() if not l.startswith("WARNING: Location"))
    assert proc.returncode == 0, "line %s does not install together:\n%s" % (request.param, stderr[-4000:])
    installs = json.loads(report.read_text())["install"]
    return request.param, line, pins, {canonicalize_name(i["metadata"]["name"]): i["metadata"] for i in installs}


def test_every_pin_resolves_to_itself(resolved):
    name, _, pins, meta = resolved
    wrong = {p: (v, meta.get(p, {}).get("version")) for p, v in pins.items()
             if p not in meta or Version(meta[p]["version"]).public != Version(v).public}
    assert not wrong, "line %s: pin -> (pinned, resolved): %s" % (name, wrong)


def test_every_requirement_between_pins_is_satisfied(resolved):
    name, line, pins, meta = resolved
    env = dict(default_environment(), python_version=str(line["python"]),
               python_full_version=str(line["python"]) + ".0", sys_platform="linux", platform_system="Linux",
               platform_machine="x86_64")
    checked, broken = 0, []
    for package in pins:
        for spec in meta[package].get("requires_dist") or []:
            req = Requirement(spec)
            target = canonicalize_name(req.name)
            if target not in pins:
                continue
            if req.marker is not None and not any(req.marker.evaluate(dict(env, extra=e)) for e in ("", "torch")):
                continue
            checked += 1
            if not req.specifier.contains(Version(pins[target]), prereleases=True):
                broken.append("%s %s requires %s, the line pins %s==%s" % (package, pins[package], spec, target,
                                                                          pins[target]))
    assert not broken, "line %s:\n  %s" % (name, "\n  ".join(broken))
    assert checked >= 10, "only %d requirements between pins were found: the metadata was not read" % checked


def test_the_lines_python_is_the_pins_floor(resolved):
    name, line, pins, meta = resolved
    floors = {}
    for package in pins:
        spec = SpecifierSet(meta[package].get("requires_python") or "")
        assert spec.contains(str(line["python"]) + ".0"), \
            "line %s: %s %s requires Python %s, not %s" % (name, package, pins[package], spec, line["python"])
        lows = [Version(s.version) for s in spec if s.operator in (">=", ">", "~=")]
        if lows:
            floors[package] = max(lows)
    top = max(floors.values())
    assert "%d.%d" % (top.major, top.minor) == str(line["python"]), \
        "line %s: python %s, but the highest Requires-Python floor is %s (%s)" % (
            name, line["python"], top, sorted(p for p, v in floors.items() if v == top))


def test_the_cuda11_line_and_the_current_line_exist():
    """The lines the matrix keeps at least: the current one with cpu, cu126 and cu130, the last torch for cu118."""
    variants = {line["torch"]: set(line["variants"]) for line in LINES.values()}
    assert variants["2.13.0"] == {"cpu", "cu126", "cu130"}
    assert "cu118" in variants["2.7.1"]
