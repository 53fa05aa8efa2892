"""The preflight's package check: node_report's reading of the venv (importlib.metadata) and of the lock python_env
records there, and files/preflight.py's judgement of every node's against its lock and the others'. The distributions
are this Python's own, read for real; the lock is written as python_env writes it; the other "nodes" are edited copies
of this one's report."""

import copy
import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parents[2]


def load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


preflight = load(ROLES / "cluster_check" / "files" / "preflight.py")
node_report = load(ROLES / "cluster_check" / "library" / "node_report.py")

HOSTS = ["head-1", "worker-1", "worker-2"]


def version(name):
    return importlib.metadata.version(name)


def write_lock(path, lines):
    """A lock as python_env's packages.yml writes it: its comment header, then one requirement a line."""
    path.write_text("# Managed by Ansible (role python_env): what site.yml installed in this venv.\n"
                    + "\n".join(lines) + "\n")
    return str(path)


def lock_of_this_python(tmp_path):
    """A lock of three packages this Python has, pinned to what is installed (one name spelled as a lock spells it)."""
    return write_lock(tmp_path / "dsc-lock.txt", ["PyYAML==%s" % version("PyYAML"), "pytest==%s" % version("pytest"),
                                                   "Jinja2==%s" % version("jinja2")])


def test_the_lock_file_is_the_one_python_env_writes():
    python_env = yaml.safe_load((ROLES / "python_env" / "vars" / "main.yml").read_text())
    cluster_check = yaml.safe_load((ROLES / "cluster_check" / "vars" / "main.yml").read_text())
    assert python_env["_python_env_lock_file"] == cluster_check["_cluster_check_lock_file"] \
        == "{{ venv_dir }}/dsc-lock.txt"
    install = (ROLES / "python_env" / "tasks" / "packages.yml").read_text()
    assert 'name: "{{ _python_env_pinned }}"' in install and "{{ _python_env_lock | join('\\n') }}\\n\"" in install
    # what Jinja gets once YAML has read the task: a line break between the requirements, not a backslash and an n
    # (a `|` block scalar kept them, and every node's lock was one line)
    record = next(task for task in yaml.safe_load(install) if "ansible.builtin.copy" in task)
    assert "join('\n')" in record["ansible.builtin.copy"]["content"]


def test_the_installed_distributions_are_importlib_metadatas_with_pep503_names():
    found = node_report.installed_distributions()
    assert found["pyyaml"] == version("PyYAML") and found["pytest"] == version("pytest")
    assert all(name == node_report.canonical_name(name) for name in found)
    assert node_report.canonical_name("huggingface_hub") == node_report.canonical_name("Huggingface.Hub") \
        == "huggingface-hub"


def test_the_lock_is_read_as_pip_reads_a_requirements_file(tmp_path):
    path = write_lock(tmp_path / "lock.txt", ["torch==2.13.0+cpu", "", "huggingface_hub==2.4.0  # the hub",
                                              "--constraint /opt/venv/dsc-constraints.txt",
                                              "accelerate[deepspeed] >= 1.0, <2 ; python_version >= '3.8'",
                                              "ninja"])
    assert node_report.read_lock(path) == {"torch": "==2.13.0+cpu", "huggingface-hub": "==2.4.0",
                                           "accelerate": ">=1.0,<2", "ninja": ""}
    assert node_report.read_lock(str(tmp_path / "absent.txt")) is None


def test_a_venv_that_matches_its_lock_differs_in_nothing(tmp_path):
    lock = node_report.check_lock(lock_of_this_python(tmp_path), node_report.installed_distributions())
    assert lock["found"] is True and lock["differs"] == []
    assert set(lock["pins"]) == {"pyyaml", "pytest", "jinja2"}


def test_a_missing_package_and_another_version_are_named_with_what_the_lock_expects(tmp_path):
    path = write_lock(tmp_path / "dsc-lock.txt", ["PyYAML==%s" % version("PyYAML"), "pytest==0.0.1",
                                                   "dsc-no-such-package==1.2.3", "jinja2>=1"])
    lock = node_report.check_lock(path, node_report.installed_distributions())
    assert lock["differs"] == [{"name": "pytest", "expected": "==0.0.1", "found": version("pytest")},
                               {"name": "dsc-no-such-package", "expected": "==1.2.3", "found": None}]


def test_the_report_carries_the_packages_and_the_lock_check(tmp_path):
    path = lock_of_this_python(tmp_path)
    report = node_report.node_report("cpu", {}, 0, path)
    assert report["packages"] == node_report.installed_distributions()
    assert report["lock"] == {"file": path, "found": True, "pins": node_report.read_lock(path), "differs": []}
    assert "lock" not in node_report.node_report("cpu", {})


def cluster_reports(tmp_path):
    """Three nodes with this Python's report and its lock."""
    report = node_report.node_report("cpu", {}, 0, lock_of_this_python(tmp_path))
    return {host: copy.deepcopy(report) for host in HOSTS}


def uninstall(report, *names):
    """The report of the same node after `pip uninstall -y NAMES` in its venv: node_report's own check again."""
    for name in names:
        del report["packages"][name]
    report["lock"] = node_report.check_lock(report["lock"]["file"], report["packages"])


def test_a_node_missing_packages_of_its_lock_is_refused_naming_each_and_site_yml_for_it(tmp_path):
    reports = cluster_reports(tmp_path)
    uninstall(reports["worker-1"], "pytest", "jinja2")
    problems, warnings, column = preflight.packages(reports, HOSTS, "head-1")
    path = reports["worker-1"]["lock"]["file"]
    assert problems == ["host worker-1: 2 packages of its venv differ from the lock site.yml installed (%s): pytest "
                        "(expected %s, found missing); jinja2 (expected %s, found missing); run `ansible-playbook "
                        "playbooks/provision.yml --limit worker-1` (python_env installs the lock again); -e "
                        "cluster_check_package_lock=false only warns" % (path, version("pytest"), version("jinja2"))]
    assert warnings == [] and column == {"head-1": "3/3", "worker-1": "1/3", "worker-2": "3/3"}
    problems, warnings, _ = preflight.packages(reports, HOSTS, "head-1", refuse=False)
    assert problems == [] and len(warnings) == 1 and warnings[0].startswith("host worker-1: 2 packages")
    assert "only warns" not in warnings[0]


def test_another_version_is_named_with_the_one_found(tmp_path):
    reports = cluster_reports(tmp_path)
    reports["worker-2"]["packages"]["pyyaml"] = "5.1"
    reports["worker-2"]["lock"] = node_report.check_lock(reports["worker-2"]["lock"]["file"],
                                                         reports["worker-2"]["packages"])
    problems, _, _ = preflight.packages(reports, HOSTS, "head-1")
    assert len(problems) == 1
    assert "host worker-2: 1 package of its venv differs" in problems[0]
    assert ": pyyaml (expected %s, found 5.1); run" % version("PyYAML") in problems[0]


def test_a_node_without_a_recorded_lock_is_warned_about(tmp_path):
    reports = cluster_reports(tmp_path)
    reports["worker-2"]["lock"] = node_report.check_lock(str(tmp_path / "none.txt"), reports["worker-2"]["packages"])
    problems, warnings, column = preflight.packages(reports, HOSTS, "head-1")
    assert problems == [] and column["worker-2"] == "-"
    assert warnings == ["host worker-2: no lock recorded in its venv (%s): its packages were not checked against what "
                        "site.yml installs; run `ansible-playbook playbooks/provision.yml --limit worker-2` (python_env "
                        "records it)"
                        % (tmp_path / "none.txt")]


def test_a_node_whose_lock_differs_from_the_others_is_refused(tmp_path):
    reports = cluster_reports(tmp_path)
    other = write_lock(tmp_path / "other.txt", ["PyYAML==%s" % version("PyYAML"), "pytest==%s" % version("pytest")])
    reports["worker-1"]["lock"] = node_report.check_lock(other, reports["worker-1"]["packages"])
    problems, _, column = preflight.packages(reports, HOSTS, "head-1")
    assert column["worker-1"] == "2/2"
    assert problems == ["host worker-1: site.yml installed another lock there than on head-1, worker-2: jinja2 not "
                        "locked (%s on head-1); give every node the same python_env_* variables (group_vars) and run "
                        "`ansible-playbook site.yml`" % version("jinja2")]


def test_packages_outside_the_lock_that_differ_between_nodes_are_warned_about(tmp_path):
    reports = cluster_reports(tmp_path)
    extra = reports["worker-2"]["packages"]
    extra["dsc-hand-installed"] = "0.1"
    outside = sorted(n for n in extra if n not in reports["worker-2"]["lock"]["pins"] and n not in ("torch",
                                                                                                       "deepspeed"))
    moved = next(n for n in outside if n != "dsc-hand-installed")
    extra[moved] = "999"
    problems, warnings, _ = preflight.packages(reports, HOSTS, "head-1")
    assert problems == []
    said = {"dsc-hand-installed": "dsc-hand-installed 0.1 (missing on head-1)",
            moved: "%s 999 (%s on head-1)" % (moved, reports["head-1"]["packages"][moved])}
    assert warnings == ["host worker-2: packages outside the lock differ from head-1, worker-1's: %s; install the "
                        "same versions in its venv (pip install NAME==VERSION), or remove its venv_dir and run "
                        "`ansible-playbook playbooks/provision.yml --limit worker-2`"
                        % ", ".join(said[n] for n in sorted(said))]


def test_the_parity_table_has_the_lock_column(tmp_path):
    reports = cluster_reports(tmp_path)
    uninstall(reports["worker-1"], "pytest")
    probe = {"python_version": "%d.%d.%d" % sys.version_info[:3], "torch": None, "deepspeed": None}
    text, problems = preflight.check_nodes({"head": "head-1", "hosts": HOSTS, "multi_node": True, "launcher": "ansible",
                                            "probes": {h: probe for h in HOSTS}, "reports": reports})
    lines = text.splitlines()
    assert lines[0].split()[-1] == "lock" and lines[3].split()[-1] == "2/3" and lines[2].split()[-1] == "3/3"
    assert len(problems) == 1 and problems[0].startswith("host worker-1: 1 package of its venv differs")
    assert os.path.basename(reports["worker-1"]["lock"]["file"]) == "dsc-lock.txt"
