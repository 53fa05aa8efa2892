"""roles/deepspeed/library/deepspeed_probe.py run as the role runs it: through Ansible, with this Python as the venv's
interpreter. Its result is probe()'s, in check mode too and never changed; another interpreter than the venv's, or a
broken generated file, fails the task with what, where and the fix."""

import importlib.util
import os
import sys

import pytest

pytestmark = pytest.mark.slow  # runs ansible

spec = importlib.util.spec_from_file_location(
    "deepspeed_probe", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "library", "deepspeed_probe.py"))
deepspeed_probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(deepspeed_probe)


def test_the_module_returns_the_probe_in_check_mode(run_module, tmp_path):
    marker = tmp_path / "build-key"
    marker.write_text("ds-key\n")
    result = run_module("deepspeed", "deepspeed_probe", {"marker": str(marker)}, check=True)
    expected = deepspeed_probe.probe(str(marker))
    assert result["changed"] is False and not result.get("failed"), result
    assert {key: result[key] for key in expected} == expected
    assert result["marker"] == "ds-key" and result["python_tag"] == "cp%d%d" % sys.version_info[:2]
    assert run_module("deepspeed", "deepspeed_probe")["marker"] is None  # no marker given (cluster_check's preflight)


def test_another_interpreter_than_the_venvs_is_refused(run_module, tmp_path):
    """An ansible_python_interpreter given with -e wins over the task's: the probe would describe another Python."""
    result = run_module("deepspeed", "deepspeed_probe", {"venv": str(tmp_path / "venv")})
    assert result.get("failed") is True, result
    assert result["msg"] == ("deepspeed_probe runs with %s, not with the venv's %s/bin/python (venv_dir): an "
                             "ansible_python_interpreter given with -e overrides the task's; set it in the inventory "
                             "instead" % (sys.executable, tmp_path / "venv"))
    venv_python = os.path.join(sys.prefix, "bin", "python")  # the interpreter the task sets
    assert not run_module("deepspeed", "deepspeed_probe", {"venv": sys.prefix}, python=venv_python).get("failed")


def test_a_broken_generated_file_fails_with_the_file_and_the_fix(run_module, tmp_path):
    """A DeepSpeed whose git_version_info_installed.py (written by its setup.py) does not run."""
    site = tmp_path / "site"
    (site / "deepspeed").mkdir(parents=True)
    (site / "deepspeed" / "__init__.py").write_text("")
    (site / "deepspeed" / "git_version_info_installed.py").write_text("installed_ops = {\n")
    (site / "deepspeed-0.0.1.dist-info").mkdir()
    (site / "deepspeed-0.0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: deepspeed\n"
                                                                  "Version: 0.0.1\n")
    result = run_module("deepspeed", "deepspeed_probe", env=dict(os.environ, PYTHONPATH=str(site)))
    assert result.get("failed") is True, result
    assert result["msg"].startswith("%s does not run (SyntaxError: " % (site / "deepspeed" /
                                                                        "git_version_info_installed.py")), result["msg"]
    assert "reinstall its package there (site.yml" in result["msg"]
