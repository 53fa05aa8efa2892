"""Which tests are fast is decided one way: pytest markers (pytest.ini's ``torch`` and ``slow``), in train/tests and
roles/*/tests alike; `make unit-fast` runs what carries neither. A test that runs Ansible (the ``ansible_playbook``,
``run_playbook`` and ``run_module`` fixtures of roles/conftest.py, directly or through another fixture) must carry
``slow``: collection stops, naming it, when it does not."""

import pytest

# fixtures that start ansible-playbook or ansible: a test using one (its fixture closure) is slow
SLOW_FIXTURES = frozenset({"ansible_playbook", "run_playbook", "run_module"})


def unmarked_slow(items) -> list[str]:
    """The node ids of the collected ``items`` that use a SLOW_FIXTURES fixture but carry no ``slow`` marker."""
    return [item.nodeid for item in items
            if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("slow") is None]


def pytest_collection_modifyitems(config, items):
    unmarked = unmarked_slow(items)
    if unmarked:
        raise pytest.UsageError(
            "these tests run Ansible but are not marked slow (add `pytestmark = pytest.mark.slow` to the module, or "
            "@pytest.mark.slow to the test; docs/testing.md):\n  " + "\n  ".join(unmarked))
