"""train/progress.py: the lines the playbook prints while a job runs."""

from train.progress import format_duration, format_record, main, parse_records


def test_format_duration():
    assert format_duration(None) == "?"
    assert format_duration(-1) == "?"
    assert format_duration(44.6) == "45s"
    assert format_duration(185) == "3m05s"
    assert format_duration(7380) == "2h03m"


def test_format_record_full():
    rec = {"step": 40, "max_steps": 200, "loss": 6.12, "samples_per_second": 35.14, "elapsed_s": 62, "eta_s": 247}
    assert format_record(rec) == "step 40/200 (20%) | loss 6.1200 | 35.1 samples/s | elapsed 1m02s | ETA 4m07s"


def test_format_record_missing_fields():
    assert format_record({"step": 3}) == "step 3 | loss ? | ? samples/s | elapsed ? | ETA ?"


def test_parse_records_leaves_partial_line_for_next_read():
    text = '{"step": 1}\nnot json\n{"step": 2}\n{"step": 3, "lo'
    records, consumed = parse_records(text)
    assert [r["step"] for r in records] == [1, 2]
    assert text[consumed:] == '{"step": 3, "lo'
    rest = text[consumed:] + 'ss": 1.5}\n'
    more, used = parse_records(rest)
    assert more == [{"step": 3, "loss": 1.5}] and used == len(rest)


def test_main_prints_each_record(tmp_path, capsys):
    f = tmp_path / "progress.jsonl"
    f.write_text('{"step": 5, "max_steps": 10, "loss": 2.0}\n{"step": 10, "max_steps": 10, "loss": 1.0}\n')
    assert main([str(f)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "step 5/10 (50%) | loss 2.0000 | ? samples/s | elapsed ? | ETA ?",
        "step 10/10 (100%) | loss 1.0000 | ? samples/s | elapsed ? | ETA ?",
    ]
    assert main([str(tmp_path / "missing.jsonl")]) == 2


def test_the_op_builds_planned_ops_and_each_op_start_are_read_from_its_log():
    """Lines as a real DS_BUILD_OPS=1 build on this machine logged them (pip --log); deepspeed_build_watch prints
    `compiling cpu_adam (3 of 6)` from them instead of Ansible's FAILED - RETRYING."""
    from train.progress import op_started, ops_planned

    line = ("2026-12-01T10:20:27,597   Install Ops={'deepspeed_not_implemented': False, 'async_io': False, "
            "'deepspeed_ccl_comm': False, 'deepspeed_shm_comm': 1, 'cpu_adagrad': 1, 'cpu_adam': 1, 'cpu_lion': 1, "
            "'fused_adam': 1, 'pin_memory': 1}")
    assert ops_planned(line) == 6
    assert op_started("2026-12-01T10:21:55,629   building 'deepspeed.ops.adam.cpu_adam_op' extension") == "cpu_adam"
    assert op_started("2026-12-01T10:20:28,309   building 'deepspeed.ops.comm.deepspeed_shm_comm_op' extension") \
        == "deepspeed_shm_comm"
    assert ops_planned("Building wheel for deepspeed (setup.py): started") is None
    assert op_started("gcc -pthread -c csrc/adam/cpu_adam.cpp") is None
