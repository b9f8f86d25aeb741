"""tools/memory_account.py: the step's device memory, buffer by buffer, summing to what the
trainer's memory check (microgpt.memory.required_bytes) counts."""
import importlib.util
import re
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "memory_account.py"
spec = importlib.util.spec_from_file_location("memory_account", SCRIPT)
memory_account = importlib.util.module_from_spec(spec)
spec.loader.exec_module(memory_account)


def total_gib(argv, capsys):
    memory_account.main(argv)      # (asserts its sum is required_bytes)
    table = capsys.readouterr().out
    assert "| logits (arena, head, at" in table
    return float(re.search(r"\(([0-9.]+) GiB\)", table.splitlines()[-1]).group(1))


GPT2_MEDIUM = ["--config", "andrea-120m", "--n-layer", "24", "--d-model", "1024", "--n-head",
               "16", "--batch-size", "16", "--seq-len", "1024"]
GPT2_XL = ["--config", "andrea-120m", "--n-layer", "48", "--d-model", "1600", "--n-head", "25",
           "--batch-size", "8", "--seq-len", "1024"]


# docs/kernels-step.md's figures: the LayerNorms' and GELU's outputs kept (the default,
# session 21's figures; 9.118 and 1.815 before its chunked head), GELU's recomputed
# (--recompute gelu), and all three recomputed (--recompute, all)
@pytest.mark.parametrize("argv, gib, gelu_gib, recomputed_gib", [
    (["--config", "andrea-120m", "--batch-size", "16", "--seq-len", "1024"], 8.091, 6.966,
     6.404),
    (["--config", "andrea-12m", "--batch-size", "64", "--seq-len", "256"], 1.623, 1.385, 1.268),
    (GPT2_MEDIUM, 20.461, 17.461, 15.961),
    (GPT2_XL, 48.175, 43.488, 41.144),
])
def test_the_account_of_the_bench_steps(argv, gib, gelu_gib, recomputed_gib, capsys):
    assert total_gib(argv, capsys) == gib
    assert total_gib(argv + ["--recompute", "gelu"], capsys) == gelu_gib
    assert total_gib(argv + ["--recompute"], capsys) == recomputed_gib
    assert total_gib(argv + ["--recompute", "on"], capsys) == recomputed_gib
    memory_account.main(argv + ["--modes"])
    assert capsys.readouterr().out.splitlines()[-3:] == [
        f"| off | {gib:.3f} |", f"| gelu | {gelu_gib:.3f} |", f"| all | {recomputed_gib:.3f} |"]


def test_a_config_without_a_vocabulary_asks_for_one(capsys):
    argv = ["--config", "microgpt", "--batch-size", "4", "--seq-len", "16"]
    with pytest.raises(SystemExit) as exit_:
        memory_account.main(argv)
    assert exit_.value.code == 2
    assert "vocab_size" in capsys.readouterr().err.splitlines()[-1]
    for precision in ("fp32", "bf16"):     # given one, either precision's table
        assert total_gib(argv + ["--vocab-size", "256", "--precision", precision],
                         capsys) >= 0


def test_a_deterministic_step_s_batch_holds_the_sort(capsys):
    """--deterministic: the batch's 4 rows (the ids, targets and their token_runs), the
    account still summing to required_bytes (main asserts it)."""
    memory_account.main(["--config", "andrea-12m", "--batch-size", "64", "--seq-len", "256",
                         "--deterministic"])
    table = capsys.readouterr().out
    assert "| batch | 1 x 4 x 64 x 256 | int32 |" in table
