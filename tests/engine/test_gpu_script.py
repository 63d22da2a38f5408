"""The GPU bench's CPU side: its arguments, its plan, its refusal without CUDA, the kernels
compiling for a Hopper GPU, and bench/gpu.sh being valid bash. Nothing here needs a GPU."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "kernel_speed.py"


def _load_bench():
    # by path: bench/ is no package
    spec = importlib.util.spec_from_file_location("bench_kernels", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


bench = _load_bench()


def _run(*args, env=None, timeout=120):
    env = {k: v for k, v in (env or os.environ).items() if k != "OUT"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_help_lists_the_options_without_touching_a_gpu():
    run = _run("--help")
    assert run.returncode == 0
    for flag in ("--dry-run", "--peak-gbps", "--batches", "--contexts", "--compile-only"):
        assert flag in run.stdout


def test_dry_run_plans_batches_times_contexts_with_the_kv_bytes_each_reads():
    run = _run("--dry-run")
    assert run.returncode == 0, run.stderr
    rows = [
        line for line in run.stdout.splitlines() if line.startswith("| ") and "batch" not in line
    ]
    assert len(rows) == 4 * 3
    # 64 requests x 8192 tokens x 8 KV heads x 128 dims x 2 bytes x (K and V) = 2 GiB
    assert "| 64 | 8192 | 2,048.00 |" in rows
    assert "Hq 32, Hkv 8, D 128" in run.stdout and "block 16" in run.stdout


def test_dry_run_follows_the_requested_grid_and_heads():
    run = _run("--dry-run", "--heads", "smollm2", "--batches", "2", "--contexts", "1024", "4096")
    rows = [line for line in run.stdout.splitlines() if line.startswith("| 2 |")]
    assert len(rows) == 2 and "Hq 9, Hkv 3, D 64" in run.stdout
    assert bench.kv_bytes(2, 4096, 3, 64, 2) == 2 * 2 * 4096 * 3 * 64 * 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_cuda_the_bench_says_so_in_one_line_and_exits_2():
    run = _run()
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "CUDA" in run.stderr


@pytest.mark.parametrize(
    "name,peak",
    [
        ("NVIDIA H200", 4800),
        ("NVIDIA GH200 480GB", 4000),
        ("NVIDIA H100 80GB HBM3", 3350),
        ("NVIDIA H100 PCIe", 2000),
        ("NVIDIA A100-SXM4-80GB", 2039),
        ("NVIDIA L40S", 864),
        ("NVIDIA L4", 300),
        ("Some Future GPU", None),
    ],
)
def test_peak_bandwidth_is_looked_up_by_device_name(name, peak):
    assert bench.peak_for(name) == peak


def test_contiguous_baseline_holds_the_same_kv_as_the_paged_arena():
    from paged.kernels import reference as ref

    gen = torch.Generator().manual_seed(0)
    q, kc, vc, tables, lens, k, v = bench.make_case(3, 40, 6, 2, 64, 16, torch.float32, "cpu", gen)
    contiguous = torch.nn.functional.scaled_dot_product_attention(
        q.unsqueeze(2), k, v, scale=0.125, enable_gqa=True
    ).squeeze(2)
    paged = ref.paged_decode_attention(q, kc, vc, tables, lens, 0.125)
    torch.testing.assert_close(contiguous, paged, atol=1e-5, rtol=1e-5)


def test_results_are_written_as_markdown_and_csv(tmp_path):
    rows = [bench.Row(1, 512, 2.0, paged_us=10.0, contiguous_us=8.0, ratio=1.25)]
    bench.write_outputs(str(tmp_path), "title", rows)
    assert "| 1 | 512 |" in (tmp_path / "kernels.md").read_text()
    assert (tmp_path / "kernels.csv").read_text().splitlines()[0].startswith("batch,context")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_gpu_sh_is_valid_bash_and_its_dry_run_plans_every_step(tmp_path):
    script = ROOT / "bench" / "gpu.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    env = {**os.environ, "OUT": str(tmp_path)}
    run = subprocess.run(
        ["bash", str(script), "--dry-run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "=== summary" in run.stdout and "kernels: ok" in run.stdout
    assert (tmp_path / "kernels.log").exists()


@pytest.mark.load
def test_kernels_compile_for_hopper_without_a_gpu():
    # the interpreter runs kernels as numpy; only a real compile catches what the GPU would reject
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = _run("--compile-only", "--arch", "90", env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    compiled = [line for line in run.stdout.splitlines() if line.startswith("compiled for sm_90")]
    # decode x2 splits, merge, prefill, store_kv for bf16 and fp32, plus decode over an fp8 arena
    assert len(compiled) == 11
    assert any("decode fp8 kv" in line for line in compiled)
