"""Colours and words shared by the app's HTML and the plotly figures (so an exported lecture
figure looks like the app). Pure data and tiny helpers; no Streamlit, no plotly."""
from __future__ import annotations

from viz.reducer import HOLE, RESERVED, TOKEN

#: Request colours by arrival rank. Red is kept out: red means external fragmentation.
REQUEST_COLOURS = ("#3B76D0", "#E8871E", "#2A9D78", "#8D63C9", "#C9A227", "#2FA6C8",
                   "#A0522D", "#6F8F1F", "#C23B8C", "#5561C4", "#4D7F8F", "#B8734A")
FREE_COLOUR = "#ECEFF3"
HOLE_COLOUR = "#F4B9B2"
HOLE_MARK = "#C8322B"
INK = "#1F2933"
MUTED = "#6B7785"
CHANGED = "#111827"

#: Accounting categories (the paper's Fig. 2) in the metrics strip, timeline and scoreboard.
CATEGORY_COLOURS = {"token_states": "#2F8F5B", "reservation": "#F2C14E",
                    "internal": "#E07A3F", "external": "#D1453B", "free": "#D5DAE1"}
SIDE_COLOURS = {"left": "#B7642A", "right": "#2F62C8"}

#: How pale a request's colour gets for slots it holds but has not filled.
RESERVED_TINT = 0.58
INTERNAL_TINT = 0.84


def request_colour(order: int) -> str:
    return REQUEST_COLOURS[order % len(REQUEST_COLOURS)]


def tint(hex_colour: str, amount: float) -> str:
    """Mix ``hex_colour`` with white; ``amount`` 0 keeps it, 1 gives white."""
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    mix = [round(c + (255 - c) * amount) for c in (r, g, b)]
    return "#" + "".join(f"{c:02X}" for c in mix)


def cell_colour(code: str, order: int | None) -> str:
    """The fill of one slot: its owner's colour, paler the less it is used."""
    if order is None:
        return HOLE_COLOUR if code == HOLE else FREE_COLOUR
    base = request_colour(order)
    if code == TOKEN:
        return base
    return tint(base, RESERVED_TINT if code == RESERVED else INTERNAL_TINT)


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
