"""Lesson animations for slides (paged/viz/export/animate.py via ``python -m paged export --format gif,mp4``):
the GIF and the MP4 hold exactly the frames asked for, at the asked rate, 16:9, read back with
the libraries that wrote them."""

from __future__ import annotations

from pathlib import Path

import pytest

from paged.viz.export import animate
from paged.viz.export import lecture as export
from paged.viz.export.serve import CHROMIUM

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "paged" / "lessons" / "six-steps" / "trace.jsonl"


def test_frame_ranges_follow_slice_rules():
    assert animate.frame_range(None, 10) == range(10)
    assert animate.frame_range("2:5", 10) == range(2, 5)
    assert animate.frame_range(":3", 10) == range(3)
    assert animate.frame_range("7:", 10) == range(7, 10)
    assert animate.frame_range("-2:", 10) == range(8, 10)
    assert animate.frame_range("5:500", 10) == range(5, 10)
    for bad in ("5:2", "20:30", "a:b", "1:2:3", "1"):
        with pytest.raises(animate.AnimationError):
            animate.frame_range(bad, 10)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--frames", "9:3"], "selects no frame"),
        (["--frames", "x"], "is not A:B"),
        (["--fps", "0"], "out of range"),
        # a GIF stores whole hundredths of a second: 60 fps would be written as 10 ms (100 fps)
        (["--fps", "60"], "faster than a GIF plays"),
        (["--frames", "-1:-5"], "selects no frame"),  # argparse took -1:-5 for an option
    ],
)
def test_bad_animation_options_are_one_line_errors(tmp_path, capsys, argv, says):
    code = export.main(["--lesson", "six-steps", "--out", str(tmp_path), "--format", "gif", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and says in err and "\n" not in err


@pytest.mark.parametrize(
    "fmt, argv, says",
    [
        ("html", ["--fps", "0"], "--fps applies only to the gif and mp4"),
        ("png,svg", ["--frames", "9:3"], "--frames applies only to the gif and mp4"),
        ("html,pdf", ["--fps", "4", "--frames", "0:5"], "--frames and --fps apply only to"),
    ],
)
def test_an_animation_option_without_an_animation_is_named_as_unused(
    tmp_path, capsys, fmt, argv, says
):
    """Not its value's error (html never reads --fps): that the option does nothing here."""
    code = export.main(["--lesson", "six-steps", "--out", str(tmp_path), "--format", fmt, *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and says in err and "\n" not in err
    assert f"--format {fmt} asks for neither" in err
    assert not any(tmp_path.iterdir())  # refused before any work


def test_the_api_refuses_what_the_cli_refuses_and_checks_values_only_for_animations(tmp_path):
    with pytest.raises(export.ExportError, match="--fps applies only"):
        export.export_lesson("six-steps", tmp_path, ["html"], fps=0)
    with pytest.raises(export.ExportError, match="--frames applies only"):
        export.export_lesson("six-steps", tmp_path, ["svg"], frames="1:2")
    with pytest.raises(export.ExportError, match="out of range"):  # gif reads it: checked
        export.export_lesson("six-steps", tmp_path, ["html", "gif"], fps=0)
    with pytest.raises(export.ExportError, match="selects no frame"):
        export.export_lesson("six-steps", tmp_path, ["mp4"], frames="9:3")
    assert not any(tmp_path.iterdir())


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium")
@pytest.mark.parametrize("frames, fps, lang", [("3:10", 2.0, "en"), ("6:10", 5.0, "zh")])
def test_gif_and_mp4_hold_the_frames_asked_for_with_each_frames_own_caption(
    tmp_path, monkeypatch, frames, fps, lang
):
    """What is photographed is the player showing that frame with that frame's caption (the
    caption texts themselves are checked against the frame's numbers in test_captions.py)."""
    import imageio.v2 as iio2
    from PIL import Image

    from paged.engine.trace import io as T
    from paged.viz.fold import captions
    from paged.viz.fold.lesson import build
    from paged.viz.fold.lesson_folder import load_spec

    taken: list[animate.Shot] = []
    photograph = animate.screenshots

    def spy(*args, **kwargs):  # the export's own shots, looked at as they pass
        taken.extend(photograph(*args, **kwargs))
        return list(taken)

    monkeypatch.setattr(animate, "screenshots", spy)
    a, b = (int(x) for x in frames.split(":"))
    want = b - a
    assert (
        export.main(
            [
                "--lesson",
                "six-steps",
                "--out",
                str(tmp_path),
                "--format",
                "gif,mp4",
                "--frames",
                frames,
                "--fps",
                str(fps),
                "--lang",
                lang,
            ]
        )
        == 0
    )
    gif, mp4 = tmp_path / "six-steps.gif", tmp_path / "six-steps.mp4"
    assert gif.read_bytes()[:6] == b"GIF89a"
    with Image.open(gif) as im:
        assert im.n_frames == want
        assert im.size == animate.SIZE and im.size[0] * 9 == im.size[1] * 16
        assert im.info["duration"] == animate.gif_delay_ms(fps) == round(1000 / fps)
        im.seek(0)
        first = im.convert("RGB").tobytes()
        im.seek(want - 1)
        assert im.convert("RGB").tobytes() != first  # the frames really differ
    head = mp4.read_bytes()[:12]
    assert head[4:8] == b"ftyp"
    reader = iio2.get_reader(mp4)
    try:
        meta = reader.get_meta_data()
        assert meta["size"] == animate.SIZE
        assert meta["fps"] == pytest.approx(fps)
        assert abs(meta["duration"] - want / fps) <= 1 / fps + 1e-6
        assert abs(reader.count_frames() - want) <= 1
    finally:
        reader.close()
    lesson = build(load_spec("six-steps"), T.read(TRACE))
    assert [s.frame for s in taken] == list(range(a, b))
    for s in taken:
        assert s.png[:8] == b"\x89PNG\r\n\x1a\n"
        assert s.caption == captions.caption(lesson, s.frame, lang)
    assert len({s.png for s in taken}) == want


def test_too_many_frames_for_one_animation_is_refused_before_any_work(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.setattr(animate, "MAX_FRAMES", 5)
    code = export.main(["--lesson", "six-steps", "--out", str(tmp_path), "--format", "html,mp4"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--frames A:B" in err and "\n" not in err
    assert animate.frame_range("0:5", 50) == range(5)


def test_gif_delays_are_what_a_gif_can_store_and_play():
    assert [animate.gif_delay_ms(f) for f in (2, 5, 30, 40, 50)] == [500, 200, 30, 20, 20]
    assert animate.check_fps(50, ["gif"]) == 50 and animate.check_fps(60, ["mp4"]) == 60
    with pytest.raises(animate.AnimationError, match="at most 50"):
        animate.check_fps(51, ["gif", "mp4"])
