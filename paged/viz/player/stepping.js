// Where each key takes the player, as pure functions of the payload's data (frames, chapters,
// keyframes, slots): no DOM, so Node's test runner checks them (tests/js). player.js applies
// them. The files of the player share one scope on a page (payload.py SCRIPTS: one module, in
// a fixed order); in Node each is a CommonJS module of its own.

const SPEEDS = [1, 2, 4, 8, 15, 30]; // frames per second, + and − move along them

// What each key does (a Map: a key named "constructor" is no command); ? and Escape answer even
// over the help, every other key only closes it.
const KEYS = new Map(
  Object.entries({
    ArrowRight: "next",
    ArrowLeft: "prev",
    PageDown: "step-next",
    PageUp: "step-prev",
    Home: "first",
    End: "last",
    " ": "play",
    Spacebar: "play",
    "+": "faster",
    "=": "faster",
    "-": "slower",
    "−": "slower",
    _: "slower",
    f: "present",
    F: "present",
    t: "theme",
    T: "theme",
    r: "request-next",
    R: "request-prev",
    c: "console",
    C: "console",
    h: "read",
    H: "read",
    "?": "help",
    Escape: "escape",
  }),
);
const PLAYER_KEYS = new Set([...KEYS.keys()].filter((k) => k !== "?" && k !== "Escape"));

// The frame shown for a request of frame ``i`` of ``n``: a whole number in range. Math.trunc,
// not i | 0: that wraps past 2**31 (frame=4294967301 opened frame 5); NaN is the first.
function clampFrame(i, n) {
  return Math.max(0, Math.min(n - 1, Math.trunc(i) || 0));
}

// The chapter frame ``i`` falls in: the last one starting at or before it.
function chapterOf(chapters, i) {
  for (let n = chapters.length - 1; n >= 0; n--) if (chapters[n].start <= i) return n;
  return 0;
}

// The nearest chapter at or before chapter ``n`` that shows a lesson step (-1: none does).
function lastStepBefore(chapters, n) {
  for (let k = n; k >= 0; k--) if (chapters[k].step !== null) return k;
  return -1;
}

// A chapter forward: the next chapter's start (the last frame from the last chapter). Back:
// this chapter's start, or from its start the previous chapter's.
function chapterJump(chapters, i, n, dir) {
  const c = chapterOf(chapters, i);
  if (dir > 0) return c + 1 < chapters.length ? chapters[c + 1].start : n - 1;
  if (i > chapters[c].start) return chapters[c].start;
  return c > 0 ? chapters[c - 1].start : 0;
}

// The clicker (PageDown / PageUp): the next or previous keyframe (a lesson step), never a
// chapter between them; past the last or before the first it stays. A run that reaches none
// of its steps (a lab recording) steps by chapter instead.
function clickJump(keyframes, chapters, i, n, dir) {
  if (!keyframes.length) return chapterJump(chapters, i, n, dir);
  const to = dir > 0 ? keyframes.find((k) => k > i) : keyframes.findLast((k) => k < i);
  return to === undefined ? i : to;
}

// Where a stepping command lands from frame ``i`` of ``n`` (undefined: it is no step).
function landing(command, i, n, chapters, keyframes) {
  switch (command) {
    case "next":
      return clampFrame(i + 1, n);
    case "prev":
      return clampFrame(i - 1, n);
    case "first":
      return 0;
    case "last":
      return n - 1;
    case "step-next":
      return clickJump(keyframes, chapters, i, n, 1);
    case "step-prev":
      return clickJump(keyframes, chapters, i, n, -1);
    default:
      return undefined;
  }
}

// One notch faster (d 1) or slower (d -1), within SPEEDS: an index into it.
function nextSpeed(speed, d) {
  return Math.max(0, Math.min(SPEEDS.length - 1, speed + d));
}

// The payload names its frame records' slots in order (payload.py SLOTS): name -> index. A
// payload that lacks one the player fills is refused here, not drawn half.
function slotIndex(slots, needed) {
  const at = {};
  (slots || []).forEach((s, k) => {
    at[s] = k;
  });
  const missing = needed.filter((s) => !(s in at));
  if (missing.length) throw new Error(`payload has no slot ${missing.join(", ")}`);
  return at;
}

if (typeof module === "object") {
  module.exports = {
    SPEEDS,
    KEYS,
    PLAYER_KEYS,
    clampFrame,
    chapterOf,
    lastStepBefore,
    chapterJump,
    clickJump,
    landing,
    nextSpeed,
    slotIndex,
  };
}
