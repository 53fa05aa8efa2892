"""The rules of docs/developers/architecture.md ("Rules of thumb") that the roles' YAML can break, kept here, with
the places that break them today named (its "Known debts"): a new one fails, an old one mended needs no change here.
Reads the files as text: a fast-tier test."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# roles whose tasks/main.yml still holds tasks of its own instead of only include_tasks / import_tasks of its steps
MAIN_WITH_TASKS = {"train_launch", "train_plan"}
# task files that still build a value with a Jinja program ({% set %} / {% for %}) instead of a filter plugin
JINJA_PROGRAMS = {"roles/cluster_check/tasks/preflight.yml", "roles/cluster_check/vars/main.yml",
                  "roles/node_env/tasks/nccl_conf.yml",
                  "roles/ssh_mesh/tasks/etc_hosts.yml", "roles/train_launch/tasks/passthrough.yml",
                  "roles/train_launch/tasks/stop.yml"}
# task files that still parse a script's printed JSON (or a file's) with from_json instead of a module's return keys
FROM_JSON = {"roles/cluster_check/tasks/health.yml", "roles/cluster_check/tasks/preflight.yml",
             "roles/cluster_check/vars/main.yml", "roles/deepspeed/tasks/build.yml",
             "roles/deepspeed/tasks/install.yml", "roles/node_env/tasks/vars.yml", "roles/python_env/tasks/torch.yml",
             "roles/python_env/tasks/verify.yml", "roles/train_launch/tasks/attach.yml",
             "roles/train_launch/tasks/collect.yml", "roles/train_launch/tasks/follow.yml",
             "roles/train_launch/tasks/stop.yml", "roles/train_stage/tasks/code.yml",
             "roles/train_stage/tasks/imports.yml", "roles/train_stage/tasks/resume.yml"}

_TASK = re.compile(r"^- (?:.*\n(?:  .*\n|\n)*?)?  (?P<module>\w+\.\w+\.\w+):", re.M)  # a task's FQCN module
_JINJA_PROGRAM = re.compile(r"\{%-?\s*(?:set|for)\b")


def role_yaml() -> list[Path]:
    """The roles' and playbooks' YAML, less the molecule scenarios (tests, not the project's tasks)."""
    return sorted(p for top in ("roles", "playbooks") for p in (REPO / top).rglob("*.yml")
                  if "molecule" not in p.parts and p.is_file())


def test_a_roles_tasks_main_is_a_table_of_contents():
    """tasks/main.yml lists the role's steps, each an include_tasks (or import_tasks) of tasks/<step>.yml."""
    grown = []
    for main in sorted((REPO / "roles").glob("*/tasks/main.yml")):
        modules = {m.group("module") for m in _TASK.finditer(main.read_text(encoding="utf-8"))}
        assert modules, f"{main}: no task found (the checker no longer reads it)"
        if modules - {"ansible.builtin.include_tasks", "ansible.builtin.import_tasks"} and \
                main.parts[-3] not in MAIN_WITH_TASKS:
            grown.append(f"{main.relative_to(REPO)}: {sorted(modules)}")
    assert not grown, "move these tasks into a tasks/<step>.yml included from tasks/main.yml:\n" + "\n".join(grown)


def test_no_new_jinja_program_in_the_roles():
    """A value built with {% set %} / {% for %} is a filter plugin's function, unit-tested in the role's tests/."""
    found = [str(p.relative_to(REPO)) for p in role_yaml() if _JINJA_PROGRAM.search(p.read_text(encoding="utf-8"))]
    assert set(found) - JINJA_PROGRAMS == set(), "write a filter plugin instead: " + ", ".join(
        sorted(set(found) - JINJA_PROGRAMS))
    assert len(found) >= 1  # the checker still finds the known ones (none left: empty JINJA_PROGRAMS and this line)


def test_no_new_from_json_of_a_scripts_output():
    """What a task needs from a node comes back as a module's return keys, not as JSON printed for from_json."""
    found = [str(p.relative_to(REPO)) for p in role_yaml() if "from_json" in p.read_text(encoding="utf-8")]
    assert set(found) - FROM_JSON == set(), "return it from a module of the role's library/ instead: " + ", ".join(
        sorted(set(found) - FROM_JSON))
    assert len(found) >= 1


def test_a_test_that_runs_ansible_unmarked_is_named_at_collection():
    """conftest.py's guard of the tiers: a test whose fixtures include one that runs Ansible is named unless it is
    marked slow; one marked slow, or using no such fixture, is not."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dsc_root_conftest", REPO / "conftest.py")
    guard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard)

    class Item:
        def __init__(self, nodeid, fixturenames, slow):
            self.nodeid, self.fixturenames, self.slow = nodeid, fixturenames, slow

        def get_closest_marker(self, name):
            return object() if name == "slow" and self.slow else None

    items = [Item("a::unmarked", ["tmp_path", "plans", "ansible_playbook"], False),
             Item("b::marked", ["run_playbook"], True), Item("c::pure", ["tmp_path"], False),
             Item("d::module", ["run_module"], False)]
    assert guard.unmarked_slow(items) == ["a::unmarked", "d::module"]


def test_a_test_module_that_starts_ansible_itself_is_marked_slow():
    """What the collection guard cannot see: a test module that finds ansible-playbook itself (its path or name,
    a string of its source), carries pytest.mark.slow (its module mark or a test's)."""
    import ast

    programs = {"ansible-playbook"}
    modules = sorted([*(REPO / "train" / "tests").glob("test_*.py"), *(REPO / "roles").glob("*/tests/test_*.py")])
    starts, unmarked = [], []
    for path in modules:
        text = path.read_text(encoding="utf-8")
        names = {n.value.rsplit("/", 1)[-1] for n in ast.walk(ast.parse(text))
                 if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        if programs & names:
            starts.append(path.name)
            if "pytest.mark.slow" not in text:
                unmarked.append(str(path.relative_to(REPO)))
    assert {"test_end_to_end.py", "test_train_yml_plan.py"} <= set(starts), starts  # the checker still sees them
    assert not unmarked, "mark these slow (they run ansible-playbook): " + ", ".join(unmarked)


def test_every_play_sets_any_errors_fatal():
    """A node that fails stops the others: every play of the entry playbooks and playbooks/ says any_errors_fatal."""
    import yaml

    plays, loose = 0, []
    for path in [REPO / "site.yml", REPO / "train.yml", *sorted((REPO / "playbooks").glob("*.yml"))]:
        for play in yaml.safe_load(path.read_text(encoding="utf-8")) or []:
            if "hosts" not in play:
                continue  # an import_playbook line
            plays += 1
            if play.get("any_errors_fatal") is not True:
                loose.append(f"{path.relative_to(REPO)}: {play.get('name')}")
    assert plays >= 10 and not loose, "set any_errors_fatal: true on: " + ", ".join(loose)


def _strings(node):
    """Every string in a parsed YAML document (keys and values)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


_JINJA_EXPRESSION = re.compile(r"\{\{.*?\}\}", re.S)
_JOIN_BACKSLASH_N = re.compile(r"""join\(\s*(['"])\\n\1\s*\)""")  # join('\n') with a backslash and an n still in it


def test_a_line_break_in_a_jinja_literal_is_one():
    """A Jinja literal '\\n' in a `|` or `>` block (or a plain or single-quoted scalar) reaches Jinja as a backslash
    and an n, which Ansible 2.19 keeps as such: a lock file written on one line, a run summary printed as one quoted
    string. Only a double-quoted YAML string makes "\\n" a line break there. Parsed YAML: no join('\\n') may still
    hold the two characters backslash and n."""
    import yaml

    found = []
    for path in role_yaml():
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            for text in _strings(document):
                if any(_JOIN_BACKSLASH_N.search(expression) for expression in _JINJA_EXPRESSION.findall(text)):
                    found.append("%s: %s" % (path.relative_to(REPO), text.strip()[:80]))
    assert found == [], "write these as double-quoted YAML strings:\n" + "\n".join(found)
