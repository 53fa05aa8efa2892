"""train/ is laid out by run site (docs/developers/architecture.md, "Run sites"): which package may import which, no
import circle, and staging copies to the nodes exactly the packages that run there. Reads the source with ast: no
module is imported, so this is a fast-tier test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "train"

# package -> (the train packages it may import besides itself, staged to the nodes)
RULES = {
    "common": (set(), True),
    "controller": ({"common", "node"}, False),
    "data": ({"common"}, True),
    "node": (set(), True),
    "rank": ({"common", "node"}, True),
    "tools": (None, False),  # a developer's tool: may import anything
    "tests": (None, False),
}


def modules() -> dict[str, Path]:
    """Dotted name -> path of every module of train/ outside tests/."""
    out = {}
    for path in sorted(TRAIN.rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        if "tests" in rel.parts:
            continue
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


def train_imports(path: Path) -> set[str]:
    """The train.* modules ``path`` imports anywhere in its body (function-level imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "train"}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (use train.<package>.<module>)"
            if node.module and node.module.split(".")[0] == "train":
                found.add(node.module)
                # `from train.rank import bootstrap` imports the module train.rank.bootstrap
                found |= {f"{node.module}.{a.name}" for a in node.names}
    mods = modules()  # a package's __init__ (train.rank) holds no code: only train.<package>.<module> counts
    return {name for name in found if name in mods and name.count(".") >= 2}


def package(name: str) -> str:
    return name.split(".")[1]


def test_every_module_lives_in_a_package_with_rules():
    loose = [name for name in modules() if name != "train" and (name.count(".") < 1 or package(name) not in RULES)]
    assert not loose, f"modules outside the run-site packages: {loose}"
    assert (TRAIN / "rank").is_dir() and len(modules()) > 20, "the tree was not read"


@pytest.mark.parametrize("name", [n for n in modules() if n.count(".") >= 2])
def test_a_module_imports_only_the_packages_its_run_site_allows(name):
    pkg = package(name)
    allowed, _ = RULES[pkg]
    if allowed is None:
        return
    bad = sorted(i for i in train_imports(modules()[name]) if package(i) not in allowed | {pkg})
    assert not bad, f"{name} (runs on: {pkg}) imports {bad}; allowed: {sorted(allowed | {pkg})}"


def test_no_import_circle():
    graph = {name: train_imports(path) for name, path in modules().items()}
    state: dict[str, int] = {}

    def visit(name, stack):
        state[name] = 1
        for dep in sorted(graph.get(name, ())):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep] if dep in stack else [name, dep]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, stack + [dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert graph["train.rank.hooks"] >= {"train.rank.callbacks", "train.rank.patches"}, "imports were not read"


def test_staging_copies_exactly_the_packages_that_run_on_nodes():
    tasks = yaml.safe_load((REPO / "roles/train_stage/tasks/code.yml").read_text(encoding="utf-8"))
    sync = next(t["ansible.posix.synchronize"] for t in tasks if "ansible.posix.synchronize" in t)
    excluded = {m.group(1) for opt in sync["rsync_opts"] for m in [re.fullmatch(r"--exclude=/train/(\w+)", opt)] if m}
    assert excluded == {pkg for pkg, (_, staged) in RULES.items() if not staged}
    packages = {p.name for p in TRAIN.iterdir() if (p / "__init__.py").is_file() or p.name == "tests"}
    assert packages - {"presets"} <= set(RULES), f"a package without a rule: {packages - set(RULES)}"
