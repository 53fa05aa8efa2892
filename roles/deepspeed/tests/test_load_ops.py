"""roles/deepspeed/library/deepspeed_load_ops.py run as verify.yml runs it: through Ansible, with this Python as the
venv's interpreter and DS_ACCELERATOR=cpu. A pre-built op loads; an op that is not pre-built, or unknown, is reported
and nothing is compiled (TORCH_EXTENSIONS_DIR stays empty); in check mode too, never changed."""

import importlib.util
import os

import pytest

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # imports DeepSpeed, through ansible
if importlib.util.find_spec("deepspeed") is None:
    pytest.skip("needs the node venv's DeepSpeed (make unit)", allow_module_level=True)

spec = importlib.util.spec_from_file_location(
    "deepspeed_probe", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "library", "deepspeed_probe.py"))
deepspeed_probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(deepspeed_probe)


def test_built_ops_load_and_the_others_are_reported_uncompiled(run_module, tmp_path):
    installed = deepspeed_probe.deepspeed_info()  # what setup.py built, read without importing DeepSpeed
    built = installed["installed_ops"] if installed["accelerator_name"] == "cpu" else []
    if not built or "async_io" in built:
        pytest.skip("needs this project's CPU build of DeepSpeed (some ops pre-built, async_io not)")
    extensions = tmp_path / "torch_extensions"
    result = run_module("deepspeed", "deepspeed_load_ops", {"ops": [built[0], "async_io", "no_such_op"]}, check=True,
                        env=dict(os.environ, DS_ACCELERATOR="cpu", TORCH_EXTENSIONS_DIR=str(extensions)))
    assert result["changed"] is False and not result.get("failed"), result
    assert result["ops"] == {built[0]: "ok", "async_io": "not pre-built for accelerator cpu",
                             "no_such_op": "unknown op for accelerator cpu"}
    assert result["failures"] == {"async_io": "not pre-built for accelerator cpu",
                                  "no_such_op": "unknown op for accelerator cpu"}
    assert not extensions.exists() or not any(extensions.iterdir())  # nothing JIT-compiled


def test_a_venv_without_deepspeed_fails_with_the_fix(run_module, tmp_path):
    """Another Python (here this one with DeepSpeed hidden) cannot import DeepSpeed: the task says so and how to fix."""
    site = tmp_path / "site"
    (site / "deepspeed").mkdir(parents=True)
    (site / "deepspeed" / "__init__.py").write_text("raise ImportError('no DeepSpeed here')\n")
    result = run_module("deepspeed", "deepspeed_load_ops", {"ops": ["cpu_adam"]},
                        env=dict(os.environ, PYTHONPATH=str(site)))
    assert result.get("failed") is True, result
    assert result["msg"].startswith("DeepSpeed cannot be imported with ") and "no DeepSpeed here" in result["msg"]
    assert result["msg"].endswith("; install it into the venv with the deepspeed role (site.yml)")
