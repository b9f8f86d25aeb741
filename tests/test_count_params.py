"""tools/count_params.py: docs/design.md's figures, counted from what the model allocates."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from microgpt import GPT
from microgpt.config import GPTConfig, get_config

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "count_params.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("count_params", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


count_params = load_tool()


def by_group(cfg):
    counts, total = count_params.count_params(cfg)
    return {c.group: c for c in counts}, total


def test_andrea_120m_figures_of_the_design():
    groups, total = by_group(get_config("andrea-120m"))
    assert groups["attention"].per_layer == 2_359_296
    assert groups["attention"].all_layers == groups["attention"].total == 28_311_552
    assert groups["mlp"].total == 56_623_104
    assert groups["embedding"].total == groups["embedding"].outside_layers == 39_419_904
    assert groups["attention"].tensors == ("w_qkv", "w_o")
    assert total == 124_392_960


def test_andrea_12m_total_of_the_design():
    assert count_params.count_params(get_config("andrea-12m"))[1] == 12_297_984


@pytest.mark.parametrize("cfg", [
    GPTConfig(n_layer=3, d_model=12, n_head=3, context=5, vocab_size=7),
    get_config("microgpt", vocab_size=256),
])
def test_counts_are_what_the_model_allocates(cfg):
    groups, total = by_group(cfg)
    state = GPT(cfg, seed=0).state_dict()
    assert total == sum(t.size for t in state.values()) == sum(c.total for c in groups.values())
    in_blocks = sum(t.size for name, t in state.items() if name.startswith("h."))
    assert sum(c.all_layers for c in groups.values()) == in_blocks
    assert all(c.all_layers == cfg.n_layer * c.per_layer for c in groups.values())


def test_the_script_prints_the_breakdown():
    run = subprocess.run([sys.executable, str(SCRIPT), "--config", "andrea-120m"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    for figure in ("2,359,296", "28,311,552", "124,392,960", "56,623,104", "39,419,904", "22.8%",
                   "854,654,976"):
        assert figure in run.stdout


def test_microgpt_defaults_to_the_byte_tokenizer_and_says_so(capsys):
    assert count_params.main(["--config", "microgpt"]) == 0
    out = capsys.readouterr().out
    assert "byte tokenizer's 256" in out
    assert "vocab_size 256" in out


@pytest.mark.parametrize("argv, message", [
    (["--config", "gpt-5"], "invalid choice: 'gpt-5'"),
    (["--vocab-size", "0"], "config field vocab_size must be a positive integer"),
    (["--vocab-size", "many"], "invalid int value: 'many'"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        count_params.main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and message in captured.err
