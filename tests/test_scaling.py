"""tools/scaling.py: the commands it runs and the report it writes (the runs themselves
need several GPUs; docs/distributed.md)."""
import importlib.util
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"
spec = importlib.util.spec_from_file_location("scaling", TOOLS / "scaling.py")
scaling = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scaling)


def test_the_commands_scale_the_global_batch_and_launch_by_mpiexec(tmp_path):
    args = scaling.parse_args(["--gpus", "1", "4", "--layers", "48", "--mpiexec",
                               "mpiexec -x PYTHONPATH", "--out", str(tmp_path / "r.md")])
    one = scaling.train_command(args, 1, 0, tmp_path / "run")
    four = scaling.train_command(args, 4, 1, tmp_path / "run")
    assert one[:3] == [sys.executable, "-m", "microgpt.train"] and "--zero" not in one
    assert four[:4] == ["mpiexec", "-x", "PYTHONPATH", "-n"] and four[4] == "4"
    assert four[-2:] == ["--zero", "1"]
    for command, batch in ((one, "16"), (four, "64")):
        assert command[command.index("--batch-size") + 1] == batch
        assert command[command.index("--n-layer") + 1] == "48"


def test_the_report_divides_by_one_gpu_and_by_plain_at_the_same_size(tmp_path):
    args = scaling.parse_args(["--gpus", "1", "8", "--out", str(tmp_path / "r.md")])
    results = [{"gpus": 1, "zero": 0, "tokens_per_s": 400_000.0, "peak_mib": 20_000,
                "command": "one", "log": "a.log"},
               {"gpus": 8, "zero": 0, "tokens_per_s": 3_000_000.0, "peak_mib": 21_000,
                "command": "eight", "log": "b.log"},
               {"gpus": 8, "zero": 1, "tokens_per_s": 2_910_000.0, "peak_mib": 12_600,
                "command": "eight zero", "log": "c.log"}]
    table = [line for line in scaling.report(args, results).splitlines()
             if line.startswith("| 8 ")]
    assert table == ["| 8 | 0 | 3,000,000 | **7.50** | - | 20.5 GiB | - |",
                     "| 8 | 1 | 2,910,000 | **7.28** | 0.970 | 12.3 GiB | 0.600 |"]


@pytest.mark.parametrize("argv, message", [
    (["--gpus", "0"], "--gpus must be at least 1"),
    (["--steps", "10", "--log-every", "20"], "--log-every 20 is more than --steps 10")])
def test_bad_arguments(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        scaling.parse_args([*argv, "--out", str(tmp_path / "r.md")])
    assert exit.value.code == 2 and message in capsys.readouterr().err
