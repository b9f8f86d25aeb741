"""tools/profile_step.py's reading of torch.profiler's events, on the CPU with events made
here (torch itself is not needed)."""
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from profile_step import comparison_lines, kernel_times  # noqa: E402

CUDA, CPU = "cuda", "cpu"


def event(name, device, us=0.0, annotation=False, kernels=(), shapes=()):
    return SimpleNamespace(name=name, device_type=device, is_user_annotation=annotation,
                           time_range=SimpleNamespace(elapsed_us=lambda: us),
                           kernels=[SimpleNamespace(duration=d) for d in kernels],
                           input_shapes=list(shapes))


def two_steps():
    """Two steps' events: each a compiled graph's annotation over two kernels, an optimizer
    annotation over one, and the aten::mm that launched the GEMM."""
    step = [event("## Call CompiledFxGraph abc ##", CUDA, 900.0, annotation=True),
            event("nvjet_sm90_tst_256x128", CUDA, 300.0),
            event("triton_poi_fused_gelu_6", CUDA, 200.0),
            event("Optimizer.step#AdamW.step", CUDA, 150.0, annotation=True),
            event("multi_tensor_apply_kernel", CUDA, 120.0),
            event("aten::mm", CPU, kernels=[300.0], shapes=[(4, 8), (8, 16), ()]),
            event("aten::add", CPU, kernels=[5.0], shapes=[(4,)])]
    return step + step


def test_annotations_on_the_device_timeline_are_not_counted_as_kernels():
    kernels, gemms = kernel_times(two_steps(), CUDA, steps=2)
    assert kernels == {"nvjet_sm90_tst_256x128": (0.3, 1.0),
                       "triton_poi_fused_gelu_6": (0.2, 1.0),
                       "multi_tensor_apply_kernel": (0.12, 1.0)}
    assert gemms == {("aten::mm", "(4, 8) x (8, 16)"): (0.3, 1.0)}


def test_the_comparison_sums_kinds_of_kernels_not_annotations():
    kernels, gemms = kernel_times(two_steps(), CUDA, steps=2)
    lines = comparison_lines({"matmul": 0.4, "adamw_update": 0.1}, {"matmul": 1,
                             "adamw_update": 1}, 0.6, 0.9, kernels, gemms)
    text = "\n".join(lines)
    assert "its kernels 0.62 ms in 3 launches" in text
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}
    assert rows["GEMM (+ GELU)"].endswith("| 0.500 | -0.100 |")
    assert rows["AdamW + clip"].endswith("| 0.120 | -0.020 |")
    assert "CompiledFxGraph" not in text and "Optimizer.step" not in text


@pytest.mark.parametrize("steps", [1, 3])
def test_times_are_per_step(steps):
    kernels, _ = kernel_times([event("k", CUDA, 600.0)] * steps, CUDA, steps)
    assert kernels["k"] == pytest.approx((0.6, 1.0))
