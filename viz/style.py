"""Colours and words shared by the app's HTML and the plotly figures (so an exported lecture
figure looks like the app). Pure data and tiny helpers; no Streamlit, no plotly."""
from __future__ import annotations

from viz.reducer import HOLE, INTERNAL, RESERVED, TOKEN

#: One meaning per colour. A colour on screen names an accounting category (the paper's Fig. 2),
#: in the grid, the metrics strip, the timeline and the scoreboard alike; requests have no colour
#: of their own (they are told apart by their labels, A0 / A1 / B0 ..., and the white rules
#: between blocks). Chosen so the five stay apart under deuteranopia (tests/test_palette.py).
CATEGORY_COLOURS = {"token_states": "#2166AC", "reservation": "#A6CCEB",
                    "internal": "#E69F00", "external": "#B2182B", "free": "#E7EAEE"}
#: The mark drawn over a category's cells, and the ink of a label written on it.
CATEGORY_MARKS = {"token_states": "white", "reservation": "#1F2933", "internal": "white",
                  "external": "white", "free": "#1F2933"}
FREE_COLOUR = CATEGORY_COLOURS["free"]
HOLE_COLOUR = CATEGORY_COLOURS["external"]
INK = "#1F2933"
MUTED = "#6B7785"
HOLE_MARK = CATEGORY_MARKS["external"]
CHANGED = "#111827"
#: Requests are ink, whatever their rank (kept as a tuple for callers that index by rank).
REQUEST_COLOURS = (INK,)
#: Sides are told apart by position and title, and on timelines by the dash, not by hue.
SIDE_COLOURS = {"left": INK, "right": INK}
SIDE_DASH = {"left": "dash", "right": "solid"}

_CODE_CATEGORY = {TOKEN: "token_states", RESERVED: "reservation", INTERNAL: "internal",
                  HOLE: "external"}


def request_colour(order: int) -> str:
    return REQUEST_COLOURS[order % len(REQUEST_COLOURS)]


def tint(hex_colour: str, amount: float) -> str:
    """Mix ``hex_colour`` with white; ``amount`` 0 keeps it, 1 gives white."""
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    mix = [round(c + (255 - c) * amount) for c in (r, g, b)]
    return "#" + "".join(f"{c:02X}" for c in mix)


def cell_category(code: str, order: int | None) -> str:
    """The accounting category a grid cell shows (a slot nobody holds is free or a hole)."""
    if order is None:
        return "external" if code == HOLE else "free"
    return _CODE_CATEGORY.get(code, "free")


def cell_colour(code: str, order: int | None) -> str:
    """The fill of one slot: its category's colour (the owner does not change it)."""
    return CATEGORY_COLOURS[cell_category(code, order)]


def cell_ink(code: str, order: int | None) -> str:
    """The colour of a mark or label drawn on a slot, readable on its fill."""
    return CATEGORY_MARKS[cell_category(code, order)]


TEXT = {
    "en": {
        "token_states": "token states", "reservation": "reserved for later",
        "internal": "never used (internal)", "external": "unusable hole (external)",
        "free": "free", "changed": "changed this frame",
        "cat_short": {"token_states": "tokens", "reservation": "reserved",
                      "internal": "internal", "external": "external", "free": "free"},
        "block_tables": "Block tables (logical → physical)",
        "reservations": "Reservations (contiguous runs)",
        "queue": "Queue", "running": "running", "waiting": "waiting", "blocked": "blocked",
        "finished": "finished", "none": "none",
        "slot": "slot", "block": "block", "pos": "position", "free_slot": "free",
        "reasons": {"no_hole": "no hole large enough (external fragmentation)",
                    "no_space": "not enough free slots", "no_free_block": "no free block",
                    "batch_full": "batch is full"},
        "need": "needs {need}, free {free}, largest hole {hole}",
        "need_paged": "needs {need} slots, {free} free",
        "token_share": "token-state share", "frame": "frame", "step": "engine step",
        "running_n": "running", "waiting_n": "waiting", "blocked_n": "blocked",
        "timeline_title": "Token-state share of the arena, frame by frame",
        "scoreboard": "Scoreboard: averaged over each run",
        "max_running": "most requests at once", "mean_running": "mean running",
        "steps": "engine steps to finish", "done": "done",
        "slots": "slots", "ended": "run ended at frame {n}",
    },
    "zh": {
        "token_states": "token 状态", "reservation": "预留（以后会用）",
        "internal": "永不使用（内部碎片）", "external": "用不上的空洞（外部碎片）",
        "free": "空闲", "changed": "本帧变化",
        "cat_short": {"token_states": "token", "reservation": "预留",
                      "internal": "内部碎片", "external": "外部碎片", "free": "空闲"},
        "block_tables": "Block table（逻辑块 → 物理块）",
        "reservations": "预留区间（连续段）",
        "queue": "队列", "running": "运行中", "waiting": "等待中", "blocked": "被阻塞",
        "finished": "已完成", "none": "无",
        "slot": "槽位", "block": "块", "pos": "位置", "free_slot": "空闲",
        "reasons": {"no_hole": "没有足够大的连续空洞（外部碎片）",
                    "no_space": "空闲槽位总量不足", "no_free_block": "没有空闲 block",
                    "batch_full": "批已满"},
        "need": "需要 {need}，空闲 {free}，最大空洞 {hole}",
        "need_paged": "需要 {need} 个槽位，空闲 {free}",
        "token_share": "token 状态占比", "frame": "帧", "step": "引擎步",
        "running_n": "运行", "waiting_n": "等待", "blocked_n": "阻塞",
        "timeline_title": "逐帧看：token 状态占显存池的比例",
        "scoreboard": "记分牌：按每次运行取平均",
        "max_running": "最多同时运行", "mean_running": "平均运行数",
        "steps": "完成所需引擎步数", "done": "结束",
        "slots": "槽位", "ended": "本侧在第 {n} 帧结束",
    },
}


def words(lang: str) -> dict:
    return TEXT.get(lang, TEXT["en"])
