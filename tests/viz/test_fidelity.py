"""What the shipped lessons show is what happened: categories under the accounting's one rule,
hatches only on requests that have stopped, and texts that say what the trace shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from paged.engine.core import events as E
from paged.engine.trace.io import read
from paged.viz import ui_text
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import available, load_spec, trace_path
from paged.viz.fold.reducer import HOLE, INTERNAL, RESERVED


def _lesson(name: str) -> Lesson:
    spec = load_spec(name)
    return build(spec, read(trace_path(spec)))


@pytest.fixture(scope="module")
def six() -> Lesson:
    return _lesson("six-steps")


def test_six_steps_no_space_frames_show_free_slots_not_a_hole(six):
    """Frames 41-83 on the left: E needs 82 slots with only 60 free in total. No hole would help
    (compaction would not admit it either), so the 60 are free, as the metrics say."""
    frames = [six.left.at(i) for i in range(41, 84)]
    for f in frames:
        (b,) = f.blocked
        assert b.reason == E.BLOCKED_NO_SPACE and b.need_slots > b.free_slots
        assert f.account.external == 0 and f.count(HOLE) == 0
        assert f.account.free == b.free_slots > 0


def test_six_steps_no_hole_frame_shows_the_free_slots_as_external(six):
    hole = [f for f in six.left.frames if f.blocked_by(E.BLOCKED_NO_HOLE)]
    assert hole
    for f in hole:
        b = f.blocked_by(E.BLOCKED_NO_HOLE)
        assert f.account.external == f.count(HOLE) == b.free_slots and f.account.free == 0


def _position(f, slot: int) -> int:
    """The token position ``slot`` stands for in its owner's sequence."""
    owner, bs = f.owners[slot], f.run.block_size
    if owner in f.reservations:  # a contiguous run
        return slot - f.reservations[owner][0]
    return f.block_tables[owner].index(slot // bs) * bs + slot % bs


@pytest.mark.parametrize("name", available())
def test_a_slot_is_hatched_never_filled_once_that_is_known_and_not_before(name):
    """A request's bound (prompt + max_tokens - 1 slots) is known when it arrives, its final
    length only when it stops: a running request's slot is hatched exactly when it lies past
    the bound, a stopped one's when it lies past the final length; below, it is reserved."""
    lesson = _lesson(name)
    seen_early = 0
    for side in (lesson.left, lesson.right):
        for f in side.frames:
            stopped = {e.req: e.final_len for e in E.of_kind(f.events, E.Finished)}
            for s, c in enumerate(f.cells):
                owner = f.owners[s]
                if owner is None or c not in (INTERNAL, RESERVED):
                    continue
                if owner not in f.block_tables and owner not in f.reservations:
                    continue  # drawn once more as it stopped: its table is already gone
                view = f.requests[owner]
                limit = stopped.get(owner, view.prompt_len + view.max_tokens - 1)
                assert (c == INTERNAL) == (_position(f, s) >= limit), (name, f.index, s)
                seen_early += c == INTERNAL and owner not in stopped
    if name == "fp8-twice":  # its blocks of 16 end past short bounds while requests run
        assert seen_early


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_sliding_window_preallocation_says_its_bytes_are_the_windows(lang):
    """Mistral-7B at max_len 8,192: the 512 MiB a request costs is its 4,096-token window in every
    layer; the caption once said "reserves 8,192 tokens (512 MiB)"."""
    from paged.engine.sim.capacity import build_report, format_bytes, preset
    from paged.viz.app.capacity import TEXT, prealloc_caption

    shape = preset("mistral-7b")
    r = build_report(shape, max_len=8192)
    t = TEXT[lang]
    shown = prealloc_caption(r.concurrency, shape, t)
    window_bytes = format_bytes(shape.bytes_per_request(shape.sliding_window))
    assert r.concurrency.prealloc_bytes_per_request == shape.bytes_per_request(4096)
    assert window_bytes in shown and "4,096" in shown and "8,192" in shown
    assert "8,192 tokens (512 MiB)" not in shown and "8,192 个 token（512 MiB）" not in shown
    # a model without a window keeps the plain sentence, its bytes those of max_len
    llama = preset("llama-2-70b")
    plain = prealloc_caption(build_report(llama).concurrency, llama, t)
    assert format_bytes(llama.bytes_per_request(8192)) in plain


def test_finish_captions_count_tokens_not_kv_slots(six):
    """B has 48 tokens (prompt + output); 47 of them have K/V. The caption says both."""
    from paged.viz.fold.captions import side_caption

    seen = 0
    for side in (six.left, six.right):
        for f in side.frames:
            for e in f.events:
                if e.kind != E.Finished.kind:
                    continue
                v = f.requests[e.req]
                tokens = v.prompt_len + e.num_generated
                assert tokens == e.final_len + 1
                en, zh = side_caption(f, "en"), side_caption(f, "zh")
                assert f"{v.name} " in en and f"with {tokens} tokens ({e.final_len} K/V" in en
                assert f"共 {tokens} 个 token（K/V 写了 {e.final_len} 个槽位）" in zh
                seen += 1
    assert seen >= 4


def test_two_paged_sides_never_read_paging_keeps_going():
    """FP8 lesson: bf16 against fp8, both paged. A chapter where only the left waits must not
    say the left is the one that makes requests wait while "paging" keeps going."""
    from paged.viz.fold.chapters import chapters, title

    lesson = _lesson("fp8-twice")
    assert lesson.left.run.allocator == lesson.right.run.allocator == "paged"
    waits = [c for c in chapters(lesson) if c.phase == "left_waits"]
    assert waits, "the lesson has frames where only the left waits"
    for c in waits:
        for lang in ("en", "zh"):
            shown = title(lesson, c, lang)
            assert "paging" not in shown and "分页" not in shown, shown
    six_steps = _lesson("six-steps")  # contiguous against paged: the sentence is true there
    left = [c for c in chapters(six_steps) if c.phase == "left_waits"]
    assert left and "paging keeps going" in title(six_steps, left[0], "en")


def test_parallel_sampling_says_each_sample_recomputes_the_prompts_last_token():
    from paged.viz.fold.narration import render_step

    lesson = _lesson("parallel-sampling")
    k = next(i for i, s in enumerate(lesson.spec.steps) if s.rule.get("event") == "block_copied")
    f = lesson.right.frames[lesson.keyframes[k]]
    copy = next(e for e in f.events if e.kind == E.BlockCopied.kind)
    wrote = [
        p for e in f.events if e.kind == "tokens_written" and e.req == copy.req for p in e.positions
    ]
    prompt = f.requests[copy.req].prompt_len
    assert wrote == [prompt - 1]  # the trace: the fork writes the prompt's last token again
    en, zh = render_step(lesson, k, "en").narration, render_step(lesson, k, "zh").narration
    assert f"position **{prompt - 1}**" in en and f"位置 **{prompt - 1}**" in zh
    assert "do not compute the prompt again" not in en and "其余样本不再重算提示词" not in zh
    assert "§4.4" in en and "vLLM v1" in en and "§4.4" in zh and "vLLM v1" in zh
    last = render_step(lesson, len(lesson.spec.steps) - 1, "en").narration
    assert "computed once and held once" not in last and "last token" in last


def test_a_recompute_preemption_says_the_prompt_is_computed_again_too():
    """The caption once said "its 30 generated tokens will be recomputed" while the frame drops
    48 K/V slots: the 19-token prompt's and 29 of the output's. The slots it names are the ones
    the request held the frame before."""
    from paged.viz.fold.captions import side_caption

    lesson = _lesson("recompute-or-swap")
    seen = 0
    for side in (lesson.left, lesson.right):
        for i, f in enumerate(side.frames):
            swapped = {e.req for e in f.events if e.kind == "swapped_out"}
            for e in f.events:
                if e.kind != E.Preempted.kind or e.req in swapped:
                    continue
                v = f.requests[e.req]
                held = side.frames[i - 1].requests[e.req].filled
                assert held == v.prompt_len + e.num_generated - 1
                en, zh = side_caption(f, "en"), side_caption(f, "zh")
                assert f"its {held} K/V slots are dropped" in en
                assert f"its {v.prompt_len}-token prompt and {e.num_generated} generated" in en
                assert f"丢掉 {held} 个槽位的 K/V" in zh and f"{v.prompt_len} 个提示词 token" in zh
                seen += 1
    assert seen >= 2


def test_block_sizes_in_bytes_are_explained_across_lessons():
    """The swap lesson's blocks are fp32 (recorded on a CPU), the FP8 lesson's bf16: each says
    what the other's block would be, and the numbers agree with the other trace's header."""
    from paged.viz.fold.narration import render_step

    swap, fp8 = _lesson("recompute-or-swap"), _lesson("fp8-twice")
    swap_kib = f"{swap.right.run.block_bytes // 1024} KiB"
    bf16_kib = f"{fp8.left.run.block_bytes // 1024} KiB"
    assert swap.right.run.kv_cache_dtype == "float32" and fp8.left.run.kv_cache_dtype == "bfloat16"
    k = next(i for i, s in enumerate(swap.spec.steps) if "unit of the move" in s.title["en"])
    text = render_step(swap, k, "en").narration
    assert f"{swap_kib} each" in text and f"would be {bf16_kib}" in text and "fp32" in text
    first = render_step(fp8, 0, "en").narration
    assert f"blocks are {swap_kib}" in first and "fp32" in first
    assert f"{bf16_kib} a block" in first


def test_six_steps_scoreboard_counts_external_only_where_a_hole_was_wanted(six):
    """The scoreboard's "unusable holes" share is the mean of the frames' external shares, and
    only frames with a no_hole refusal contribute: the no_space frames 41-83 add nothing."""
    left = six.left
    n = left.run.num_slots
    hole = sum(f.account.external for f in left.frames if f.blocked_by(E.BLOCKED_NO_HOLE))
    assert all(f.account.external == 0 for f in left.frames if not f.blocked_by(E.BLOCKED_NO_HOLE))
    assert left.summary.shares["external"] == pytest.approx(hole / n / len(left.frames))
    no_space = sum(f.account.free for f in left.frames[41:84]) / n / len(left.frames)
    assert no_space > 0.05  # what the old rule called external: free now


def test_fp8_accuracy_is_said_against_its_fp32_reference_with_its_spread():
    from paged.viz.data import fp8_accuracy
    from paged.viz.fold.narration import render_step

    lesson = _lesson("fp8-twice")
    facts = fp8_accuracy.narration_facts()
    assert facts is not None
    last = len(lesson.spec.steps) - 1
    en, zh = render_step(lesson, last, "en").narration, render_step(lesson, last, "zh").narration
    assert f"**{facts.reference}** KV arena" in en and "not against the bf16 side" in en
    assert "full-precision KV" not in en and f"**{facts.reference}** KV 显存池" in zh
    assert facts.e4m3_top1_range in en and facts.e4m3_top1_range in zh and "?" not in en


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_block_size_page_counts_int32_entries_and_flags_the_essays_eight_bytes(lang):
    """The block-size page once taught 8 B an entry (an int64); vLLM keeps int32 entries."""
    from paged.engine.sim.capacity import DEFAULT_ENTRY_BYTES, ESSAY_ENTRY_BYTES, block_table_bytes
    from paged.viz.fold import sweep

    spec = sweep.load_spec("block-size")
    results = sweep.load_results(spec)
    ctx = sweep.narration_context(results)
    trade = next(s for s in spec.sections if s.chart == "tradeoff")
    text, missing = sweep.fill(trade.text[lang], ctx, lang)
    assert not missing and "int32" in text and "int64" in text
    assert DEFAULT_ENTRY_BYTES * 2 == ESSAY_ENTRY_BYTES
    b16 = next(r for r in results if r.block_size == 16)
    assert f"{b16.mean_entries * DEFAULT_ENTRY_BYTES:,.0f}" in text
    long = next(s for s in spec.sections if s.chart == "long_table")
    shown, _ = sweep.fill(long.text[lang], ctx, lang)
    per_request = block_table_bytes(sweep.LONG_LEN, 16)
    assert per_request == sweep.blocks_for(sweep.LONG_LEN, 16) * 4
    assert "max_model_len" in shown


def test_a_lab_that_runs_out_of_memory_shows_its_free_slots_free():
    """Any lab scenario that runs out of memory: while the head of the queue needs more than is
    free in total (no_space), the left's free slots are drawn and counted free, not as a hole."""
    from paged.viz.live import lab as S

    lab = S.Lab(
        (
            S.LabRequest("A", "Explain paging in one paragraph:", 40, 0),
            S.LabRequest("B", "Answer in one word: what colour is the sky?", 40, 0),
            S.LabRequest("C", "Write a short poem about memory:", 40, 0),
        ),
        num_blocks=8,
        block_size=16,
        max_model_len=96,
        policy="max",
    )
    sides = {s: {"en": s, "zh": s} for s in ("left", "right")}
    lesson = S.lesson_for(lab, S.record_dry(lab), sides, {"en": "t", "zh": "t"})
    waits = [f for f in lesson.left.frames if f.blocked_by(E.BLOCKED_NO_SPACE)]
    assert waits, "the scenario runs out of memory on the left"
    for f in waits:
        assert f.account.external == f.count(HOLE) == 0 and f.account.free > 0


ROOT = Path(__file__).resolve().parents[2]

# Sentences the project once said that the code or the sources disprove, each with the file
# that said it: none may come back.
RETIRED = [
    ("docs/engine.md", "does not know which it never will"),
    (
        "docs/trace-format.md",
        "know only what has happened: a request's unwritten slots are `reserved`",
    ),
    ("docs/app.md", "drawn only once its request has stopped"),
    ("paged/lessons/six-steps/lesson.toml", "can ever use it"),
    ("paged/lessons/block-size/narration.toml", "because its last block is still filling"),
    ("paged/viz/text/stack_page.toml", "greedy output equal for"),
    ("paged/lessons/fp8-twice/lesson.toml", "greedy output matches it for"),
    ("paged/viz/text/watch_page.toml", "listens only when its endpoint holds"),
    ("paged/viz/text/captions.toml", "turn hatched (never filled) only when their request stops"),
]


def _words(path: str) -> str:
    return " ".join((ROOT / path).read_text(encoding="utf-8").split())


@pytest.mark.parametrize(("path", "sentence"), RETIRED)
def test_a_disproved_sentence_does_not_come_back(path, sentence):
    assert sentence not in _words(path)


def test_what_replaced_them_says_what_holds():
    assert "{bytes_moved} of {kv_dtype} K/V" in _words("paged/viz/text/stack_page.toml")
    for path in ("paged/viz/text/stack_page.toml", "paged/lessons/fp8-twice/lesson.toml"):
        assert "mean common prefix" in _words(path) and "平均公共前缀" in _words(path)
    assert "`ipc://` or `inproc://`" in _words("paged/viz/text/watch_page.toml")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_essays_mmu_softmax_and_prefix_claims_are_flagged_with_their_sources(lang):
    from paged.viz.paper.essay_fixes import claim_fixes

    text = ui_text.load("paper_fidelity")[lang]
    fixes = {f.key: f for f in claim_fixes()}
    for key, section in (
        ("fix_mmu", "§2.4"),
        ("fix_online_softmax", "§3.2"),
        ("fix_prefix_hash", "§4.3"),
    ):
        assert key in fixes and text[key].startswith(section)
        assert text["sources"][fixes[key].source]
    assert "vAttention" in text["sources"]["gpu_mmu"]
    assert "5.1" in text["sources"]["vllm_kernel"]
