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
    "node": ({"common"}, True),  # rank_status.py runs as a plain script too: it imports none (its own test)
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


def test_the_node_module_that_runs_as_a_plain_script_imports_nothing_of_train():
    """roles/cluster_check and roles/train_launch run train/node/rank_status.py from its source on ``python -``'s stdin,
    where no ``train`` package is importable."""
    assert train_imports(TRAIN / "node" / "rank_status.py") == set()
    assert train_imports(TRAIN / "node" / "run_dir.py") == {"train.common.jsonio", "train.node.rank_status"}, "the rule's own check reads nothing"


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


def _defined_names(path: Path) -> set[str]:
    """The names a module defines or imports at any level (what ``from <module> import name`` may ask for)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def test_every_name_imported_from_train_exists():
    """`from train.<package>.<module> import name` anywhere in the repository (tests, roles' plugins, molecule
    verifiers: code that only a slow tier imports) names a module and a name that exist."""
    mods = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
            for p in TRAIN.rglob("*.py")}  # the tests' modules too
    sources = [p for top in ("train", "roles", "molecule") for p in (REPO / top).rglob("*.py")]
    bad = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "train"):
                continue
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            for alias in node.names:
                if f"{node.module}.{alias.name}" in mods:  # from train.rank import bootstrap
                    continue
                if node.module not in mods:
                    bad.append(f"{where}: no module {node.module}")
                elif alias.name not in _defined_names(mods[node.module]):
                    bad.append(f"{where}: {node.module} has no {alias.name}")
    assert not bad, "\n".join(bad)
    assert len(sources) > 100


# `-m train.x.y`, "train.x.y" as a word of a command, train/x/y.py: module paths that no import checks
_MODULE_STRING = re.compile(r"(?<![\w.])(train\.(?:common|controller|data|node|rank|tools)\.\w+)(?![\w/])")
_MODULE_PATH = re.compile(r"(?<![\w./])(train/(?:common|controller|data|node|rank|tools)/\w+\.py)\b")


def test_every_module_named_in_a_string_exists():
    """Module paths written as text -- `python -m train.node.checkpoints` in a task, the launch entry, a test's
    command, a docs page -- name modules that exist (a moved module leaves no import error there)."""
    mods = modules()
    files = [p for p in REPO.rglob("*") if p.is_file() and p.suffix in (".py", ".yml", ".yaml", ".sh", ".md", ".j2")
             and not {".git", ".venv", "collections", "benchmarks"} & set(p.relative_to(REPO).parts)]
    files.append(REPO / "Makefile")
    bad = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in _MODULE_STRING.finditer(text):
            name = match.group(1)
            if name not in mods and not any(m.startswith(name + ".") for m in mods):
                bad.append(f"{path.relative_to(REPO)}: {name}")
        for match in _MODULE_PATH.finditer(text):
            if not (REPO / match.group(1)).is_file():
                bad.append(f"{path.relative_to(REPO)}: {match.group(1)}")
    assert not bad, "\n".join(sorted(set(bad)))
