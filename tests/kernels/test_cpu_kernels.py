"""paged/kernels/cpu.c against the torch it replaces: paged decode attention against the reference,
the packed matmul against F.linear, and the elementwise steps against the forward's torch ops
(bit for bit where cpu.c keeps torch's rounding). Skipped where no C compiler builds it; the
engine then runs the torch path, which the rest of the suite tests."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from paged.engine.model.steps import rms_norm
from paged.kernels import cpu
from paged.kernels.reference import paged_decode_attention

pytestmark = pytest.mark.skipif(cpu.load() is None, reason=f"no CPU kernels: {cpu.why()}")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _arena(g, blocks, block_size, hkv, d):
    return (torch.randn(blocks, block_size, hkv, d, generator=g) for _ in range(2))


@pytest.mark.parametrize(
    ("hq", "hkv", "d", "block_size"),
    # head_dim 64 with groups of 1-4 take the register-held path, the rest the general loop
    [
        (9, 3, 64, 32),
        (8, 2, 64, 16),
        (4, 4, 64, 8),
        (6, 3, 64, 4),
        (10, 2, 64, 32),
        (4, 4, 32, 16),
        (8, 2, 48, 4),
        (6, 1, 16, 1),
    ],
)
@pytest.mark.parametrize("arena", [torch.float32, torch.bfloat16])
def test_decode_attention_matches_the_reference(hq, hkv, d, block_size, arena):
    """A bfloat16 arena is read as the float32 it widens to (exactly), every sum in float32."""
    g = torch.Generator().manual_seed(hq * 100 + d)
    blocks, batch = 64, 7
    k_cache, v_cache = (x.to(arena) for x in _arena(g, blocks, block_size, hkv, d))
    # lengths on and around block edges, and 1; tables padded with ids that must never be read
    lens = torch.tensor([1, block_size, block_size + 1, 3 * block_size - 1, 5, 2 * block_size, 9])
    width = int(-(-lens.max() // block_size)) + 2
    tables = torch.randint(0, blocks, (batch, width), generator=g, dtype=torch.int32)
    tables[0, 0] = tables[1, 0]  # a block two requests share, as prefix caching makes them
    for b in range(batch):
        tables[b, int(-(-lens[b] // block_size)) :] = -7
    q = torch.randn(batch, hq, d, generator=g)
    want = paged_decode_attention(
        q, k_cache.float(), v_cache.float(), tables.clamp(min=0), lens, d**-0.5
    )
    got = cpu.DecodeAttention()(q, k_cache, v_cache, tables, lens, d**-0.5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-6)


def _relaid(cache, tables, block_size):
    """The same context in blocks of ``block_size``: each request's positions in order, its
    blocks placed in the arena in reverse, so nothing lines up with the first layout."""
    rows = [cache[t].flatten(0, 1) for t in tables]
    per = -(-max(r.shape[0] for r in rows) // block_size)
    out = torch.zeros(len(rows) * per, block_size, *cache.shape[2:])
    new_tables = torch.empty(len(rows), per, dtype=torch.int32)
    for b, r in enumerate(rows):
        for j in range(per):
            blk = len(rows) * per - 1 - (b * per + j)
            part = r[j * block_size : (j + 1) * block_size]
            out[blk, : part.shape[0]] = part
            new_tables[b, j] = blk
    return out, new_tables


def test_a_rows_bits_depend_neither_on_its_company_nor_on_where_its_blocks_lie():
    # the split is fixed in positions, never by the batch: alone or among others, in blocks
    # placed anywhere, a row attends with the same bits (seeded sampling relies on it)
    g = torch.Generator().manual_seed(16)
    hq, hkv, d, bs = 9, 3, 64, 16
    tables = torch.arange(80, dtype=torch.int32).reshape(4, 20)[:, torch.randperm(20, generator=g)]
    k, v = _arena(g, 80, bs, hkv, d)
    lens = torch.tensor([320, 290, 47, 16], dtype=torch.int32)
    q = torch.randn(4, hq, d, generator=g)
    attn = cpu.DecodeAttention()
    together = attn(q, k, v, tables, lens, d**-0.5, split=4)
    k2, t2 = _relaid(k, tables, bs)
    v2, _ = _relaid(v, tables, bs)
    for b in range(4):
        alone = attn(q[b : b + 1], k2, v2, t2[b : b + 1], lens[b : b + 1], d**-0.5, split=4)
        assert torch.equal(alone, together[b : b + 1])


@pytest.mark.parametrize(("d", "hq", "hkv"), [(64, 9, 3), (32, 6, 1)])
@pytest.mark.parametrize("split", [1, 2, 3, 100])
def test_the_kernels_own_walk_is_the_reference_walk_split_by_split(d, hq, hkv, split):
    # the tile walk the kernel reports (running and own (m, l) per tile, the merged (m, l))
    # against the reference walk over the same scores, cut into the same splits
    from paged.kernels.reference import decode_scores, merge_partials, online_softmax_walk

    g = torch.Generator().manual_seed(split * d)
    bs, length = 16, 85
    k, v = _arena(g, 12, bs, hkv, d)
    table = torch.randperm(12, generator=g)[:6].to(torch.int32)
    q = torch.randn(1, hq, d, generator=g)
    stats = torch.zeros(cpu.walk_shape(1, hq, length, bs))
    lens = torch.tensor([length])
    out = cpu.DecodeAttention()(q, k, v, table[None], lens, d**-0.5, split=split, stats=stats)
    want = paged_decode_attention(q, k, v, table[None], lens, d**-0.5)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=2e-6)
    scores = decode_scores(q[0], k, table.long(), length, d**-0.5)  # [Hq, L]
    tiles, span = -(-length // bs), split * bs
    last = []
    for s0 in range(0, length, span):
        sl = scores[:, s0 : s0 + span]
        run_m, run_l, own_m, own_l, _ = online_softmax_walk(sl, torch.zeros(sl.shape[1], d), bs)
        t = slice(s0 // bs, s0 // bs + run_m.shape[0])
        for col, ref in ((0, run_m), (1, run_l), (2, own_m), (3, own_l)):
            torch.testing.assert_close(stats[0, :, t, col], ref.T, rtol=1e-6, atol=1e-6)
        last.append(t.stop - 1)
    merged_m, merged_l = merge_partials(stats[0, :, last, 0].T, stats[0, :, last, 1].T)
    torch.testing.assert_close(stats[0, :, tiles, 0], merged_m, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(stats[0, :, tiles, 1], merged_l, rtol=1e-6, atol=1e-6)
    full_m = scores.max(dim=1).values
    torch.testing.assert_close(stats[0, :, tiles, 0], full_m, rtol=1e-6, atol=1e-6)
    full_l = torch.exp(scores - full_m[:, None]).sum(1)
    torch.testing.assert_close(stats[0, :, tiles, 1], full_l, rtol=1e-5, atol=1e-5)


def test_split_rows_of_a_long_prompt_merge_to_the_reference_on_every_thread():
    # a prompt attends one query row per token: thousands of rows, the longer ones split, on
    # threads that share the partials buffer and must not mix them
    g = torch.Generator().manual_seed(3)
    k_cache, v_cache = _arena(g, 40, 16, 3, 64)
    rows, ctx = 1500, 40 * 16
    tables = torch.randperm(40, generator=g).to(torch.int32).expand(rows, 40)
    lens = torch.randint(1, ctx + 1, (rows,), generator=g)
    q = torch.randn(rows, 9, 64, generator=g)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        got = cpu.DecodeAttention()(q, k_cache, v_cache, tables, lens, 0.125, ctx, split=8)
    finally:
        torch.set_num_threads(threads)
    want = paged_decode_attention(q, k_cache, v_cache, tables, lens, 0.125)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-6)


def test_decode_attention_reads_only_the_requests_own_slots():
    g = torch.Generator().manual_seed(5)
    k_cache, v_cache = _arena(g, 8, 4, 2, 16)
    tables = torch.tensor([[3, 5], [6, 0]], dtype=torch.int32)
    lens = torch.tensor([6, 2])
    # every slot no request reads: a NaN there must reach no output
    poison = torch.ones(8, 4, dtype=torch.bool)
    poison[3], poison[5, :2], poison[6, :2] = False, False, False
    k_cache[poison], v_cache[poison] = float("nan"), float("nan")
    got = cpu.DecodeAttention()(
        torch.randn(2, 4, 16, generator=g), k_cache, v_cache, tables, lens, 0.25
    )
    assert torch.isfinite(got).all()


@pytest.mark.parametrize(
    ("tables", "lens", "match"),
    [
        ([[0, 9]], [5], "out of the arena"),
        ([[0, -1]], [5], "out of the arena"),
        ([[0, 1]], [9], "longer than its block table"),
        ([[0, 1]], [0], "empty"),
    ],
)
def test_decode_attention_refuses_a_table_that_points_outside_the_arena(tables, lens, match):
    k_cache, v_cache = torch.zeros(4, 4, 1, 8), torch.zeros(4, 4, 1, 8)
    with pytest.raises(ValueError, match=match):
        cpu.DecodeAttention()(
            torch.zeros(1, 1, 8),
            k_cache,
            v_cache,
            torch.tensor(tables, dtype=torch.int32),
            torch.tensor(lens),
            1.0,
        )


@pytest.mark.parametrize(
    ("q_dtype", "k_dtype", "v_dtype"),
    [
        (torch.float32, torch.float16, torch.float16),
        (torch.float32, torch.bfloat16, torch.float32),
        (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    ],
)
def test_decode_attention_refuses_an_arena_it_does_not_read(q_dtype, k_dtype, v_dtype):
    with pytest.raises(ValueError, match="float32 or bfloat16 arena"):
        cpu.DecodeAttention()(
            torch.zeros(1, 1, 8, dtype=q_dtype),
            torch.zeros(4, 4, 1, 8, dtype=k_dtype),
            torch.zeros(4, 4, 1, 8, dtype=v_dtype),
            torch.tensor([[0]], dtype=torch.int32),
            torch.tensor([3]),
            1.0,
        )


@pytest.mark.parametrize("rows", [1, 5, 8, 9, 16, 33, 300])
@pytest.mark.parametrize(("n", "k"), [(48, 64), (50, 3), (103, 577)])
def test_packed_matmul_matches_f_linear(rows, n, k):
    g = torch.Generator().manual_seed(rows * n + k)
    w, x = torch.randn(n, k, generator=g), torch.randn(rows, k, generator=g)
    lin = cpu.PackedLinear(w)
    torch.testing.assert_close(lin(x), F.linear(x, w), rtol=1e-5, atol=1e-4)


def test_packed_matmul_adds_into_the_residual_with_the_bits_of_a_separate_add():
    g = torch.Generator().manual_seed(3)
    w, x, h = (torch.randn(*s, generator=g) for s in ((96, 40), (16, 40), (16, 96)))
    lin = cpu.PackedLinear(w)
    want = h + lin(x)
    got = h.clone()
    assert lin(x, add_to=got) is got
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="cannot add"):
        lin(x, add_to=torch.zeros(16, 95))


def test_packed_matmul_refuses_what_it_cannot_take():
    lin = cpu.PackedLinear(torch.randn(8, 4))
    for bad in (torch.zeros(2, 5), torch.zeros(2, 4, dtype=torch.float64), torch.zeros(4)):
        with pytest.raises(ValueError, match="float32"):
            lin(bad)


def test_rms_norm_matches_the_forwards_torch_ops():
    g = torch.Generator().manual_seed(4)
    for rows in (1, 16, 300):  # 300: rows split between threads
        x, w = torch.randn(rows, 576, generator=g) * 3, torch.randn(576, generator=g)
        torch.testing.assert_close(
            cpu.rms_norm(x, w, 1e-5), rms_norm(x, w, 1e-5), rtol=2e-6, atol=1e-6
        )


def _in_child(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_without_a_compiler_the_engine_attends_with_torch_and_says_why_cpu_is_unavailable(tmp_path):
    code = (
        "import torch\n"
        "from paged.engine.errors import InvalidConfigError\n"
        "from paged.engine.model.attention import resolve_backend\n"
        "from paged.engine.model.steps import choose\n"
        "auto = resolve_backend('auto', torch.device('cpu'))\n"
        "print(auto)\n"
        "print(choose(auto, torch.device('cpu'), torch.float32).name)\n"
        "try:\n"
        "    resolve_backend('cpu', torch.device('cpu'))\n"
        "except InvalidConfigError as e:\n"
        "    print(e)\n"
    )
    out = _in_child(code, CC=str(tmp_path / "no-such-cc"), PAGED_KERNEL_CACHE=str(tmp_path))
    auto, steps, why = out.splitlines()
    assert (auto, steps) == ("torch", "torch")
    assert why.startswith("attention backend 'cpu' is unavailable") and "no-such-cc" in why


@pytest.mark.load  # three compiles of cpu.c at once: the fast gate compiles no kernel
def test_first_builds_racing_for_one_cache_each_load_a_whole_library(tmp_path):
    code = "from paged.kernels import cpu; print(cpu.load() is not None, cpu.why())"
    env = {**os.environ, "PAGED_KERNEL_CACHE": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert outs == ["True None"] * 3
    # one library and its record, and no temporary file left behind
    kinds = sorted((p.name[:4], p.suffix) for p in tmp_path.iterdir())
    assert kinds == [("cpu-", ".sha256"), ("cpu-", ".so")]


def _pass(t=4, hidden=8, heads=2, kv_heads=1, d=4, positions=None):
    g = torch.Generator().manual_seed(8)
    table = torch.randn(16, d, generator=g)
    pos = torch.arange(t) if positions is None else positions
    h = torch.randn(t, hidden, generator=g)
    return cpu.Pass(h, pos, table, table.clone(), heads, kv_heads, 1e-5), g


def test_a_pass_refuses_positions_past_its_tables_and_inputs_that_do_not_fit():
    with pytest.raises(ValueError, match="positions"):
        _pass(positions=torch.tensor([0, 1, 2, 16]))
    step, g = _pass()
    with pytest.raises(ValueError, match="cannot take"):
        step.residual(
            cpu.PackedLinear(torch.randn(8, 5, generator=g)), torch.randn(4, 5, generator=g)[:, :4]
        )
    with pytest.raises(ValueError, match="cannot take"):
        step.linear(cpu.PackedLinear(torch.randn(8, 8, generator=g)), torch.randn(8, 4).t())
    with pytest.raises(ValueError, match="norm weight"):
        step.norm(torch.ones(7))
    with pytest.raises(ValueError, match="q/k/v"):
        step.rope(torch.zeros(4, 15))
    with pytest.raises(ValueError, match="gate/up"):
        step.silu_mul(torch.zeros(3, 6))


def test_weights_packed_into_huge_pages_are_the_same_panels_each_in_its_own_aligned_place():
    g = torch.Generator().manual_seed(9)
    pages = cpu.HugePages()
    weights = [torch.randn(n, 24, generator=g) for n in (50, 7, 96)]
    packed = [cpu.pack_weight(w, pages) for w in weights]
    big = pages.empty(3, 1 << 20)  # past the map in use: a map of its own
    big.fill_(1.0)
    for w, p in zip(weights, packed, strict=True):
        assert torch.equal(p, cpu.pack_weight(w))
        assert p.data_ptr() % 64 == 0
    x = torch.randn(5, 24, generator=g)
    torch.testing.assert_close(
        cpu.PackedLinear(weights[0], pages)(x), F.linear(x, weights[0]), rtol=1e-5, atol=1e-4
    )
