"""Load pre-built DeepSpeed ops the way a job does, and report which fail, as one JSON line on stdout.

Run with the venv's interpreter: ``<venv>/bin/python load_ops.py OP [OP ...]``. ds_report only reads the list of
ops setup.py built; loading catches a built op that cannot be used (e.g. a missing shared library). An op that
is not pre-built is reported, never JIT-compiled.
"""

import json
import sys


def main():
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import accelerator_name, installed_ops
    from deepspeed.ops.op_builder.all_ops import ALL_OPS

    results = {}
    for name in sys.argv[1:]:
        if name not in ALL_OPS:
            results[name] = "unknown op for accelerator %s" % get_accelerator()._name
        elif not installed_ops.get(name) or accelerator_name != get_accelerator()._name:
            results[name] = "not pre-built for accelerator %s" % get_accelerator()._name
        else:
            try:
                ALL_OPS[name].load(verbose=False)
                results[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - report any load failure
                results[name] = "%s: %s" % (type(exc).__name__, exc)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
