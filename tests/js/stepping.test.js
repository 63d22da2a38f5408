// Where the player's keys land (paged/viz/player/stepping.js), without a browser.
const test = require("node:test");
const assert = require("node:assert/strict");
const S = require("../../paged/viz/player/stepping.js");

// 20 frames in four chapters; the third tells no lesson step (a chapter between steps)
const CHAPTERS = [
  { start: 0, end: 4, step: 0 },
  { start: 5, end: 9, step: 1 },
  { start: 10, end: 14, step: null },
  { start: 15, end: 19, step: 2 },
];
const N = 20;

test("arrows step one frame and stop at either end", () => {
  assert.equal(S.landing("next", 7, N, CHAPTERS, []), 8);
  assert.equal(S.landing("prev", 7, N, CHAPTERS, []), 6);
  assert.equal(S.landing("next", N - 1, N, CHAPTERS, []), N - 1);
  assert.equal(S.landing("prev", 0, N, CHAPTERS, []), 0);
  assert.equal(S.landing("first", 12, N, CHAPTERS, []), 0);
  assert.equal(S.landing("last", 12, N, CHAPTERS, []), N - 1);
});

test("a frame asked for by a link is a whole frame in range, never a wrapped one", () => {
  assert.equal(S.clampFrame(4294967301, N), N - 1); // i | 0 would give 5
  assert.equal(S.clampFrame(-3, N), 0);
  assert.equal(S.clampFrame(Number.NaN, N), 0);
  assert.equal(S.clampFrame(3.9, N), 3);
});

test("a chapter forward is the next chapter's start, and the end from the last chapter", () => {
  assert.equal(S.chapterJump(CHAPTERS, 6, N, 1), 10);
  assert.equal(S.chapterJump(CHAPTERS, 0, N, 1), 5);
  assert.equal(S.chapterJump(CHAPTERS, 16, N, 1), N - 1);
});

test("a chapter back is this chapter's start, or the previous one's from its start", () => {
  assert.equal(S.chapterJump(CHAPTERS, 8, N, -1), 5);
  assert.equal(S.chapterJump(CHAPTERS, 5, N, -1), 0);
  assert.equal(S.chapterJump(CHAPTERS, 0, N, -1), 0);
});

test("the clicker stops at the lesson's steps only, and stays past the first or last", () => {
  const kfs = [3, 12, 17];
  const click = (i, dir) => S.landing(dir > 0 ? "step-next" : "step-prev", i, N, CHAPTERS, kfs);
  assert.deepEqual([click(0, 1), click(3, 1), click(12, 1), click(17, 1)], [3, 12, 17, 17]);
  assert.deepEqual([click(19, -1), click(17, -1), click(8, -1), click(3, -1)], [17, 12, 3, 3]);
});

test("a run that reaches none of its steps clicks from chapter to chapter", () => {
  assert.equal(S.landing("step-next", 6, N, CHAPTERS, []), 10);
  assert.equal(S.landing("step-prev", 6, N, CHAPTERS, []), 5);
});

test("each frame is in the chapter whose start is last at or before it", () => {
  const of = [0, 4, 5, 9, 10, 14, 15, 19].map((i) => S.chapterOf(CHAPTERS, i));
  assert.deepEqual(of, [0, 0, 1, 1, 2, 2, 3, 3]);
});

test("a chapter between steps lights the step before it", () => {
  assert.equal(S.lastStepBefore(CHAPTERS, 2), 1);
  assert.equal(S.lastStepBefore(CHAPTERS, 3), 3);
  assert.equal(S.lastStepBefore([{ start: 0, step: null }], 0), -1);
});

test("keys that do not step the frames land nowhere", () => {
  for (const command of ["play", "faster", "help", "escape", undefined]) {
    assert.equal(S.landing(command, 7, N, CHAPTERS, []), undefined);
  }
});

test("every player key has a command; ? and Escape answer over the help and are no player key", () => {
  for (const k of S.PLAYER_KEYS) assert.ok(S.KEYS.get(k), k);
  assert.ok(!S.PLAYER_KEYS.has("?") && !S.PLAYER_KEYS.has("Escape"));
  assert.equal(S.KEYS.get("?"), "help");
  assert.equal(S.KEYS.get("constructor"), undefined); // a page's key is data, not a property
  assert.equal(S.KEYS.get("−"), S.KEYS.get("-")); // the minus sign a keyboard layout types
});

test("the speed moves one notch at a time and stays within the speeds offered", () => {
  assert.equal(S.SPEEDS[S.nextSpeed(2, 1)], 8);
  assert.equal(S.nextSpeed(S.SPEEDS.length - 1, 1), S.SPEEDS.length - 1);
  assert.equal(S.nextSpeed(0, -1), 0);
});

test("a frame record's slots are read by the names the payload gives them", () => {
  const at = S.slotIndex(["body", "lg", "step"], ["lg", "step"]);
  const rec = [7, 8, 9];
  assert.equal(rec[at.lg], 8);
  assert.equal(rec[at.step], 9);
  assert.throws(() => S.slotIndex(["lg"], ["lg", "rg", "step"]), /no slot rg, step/);
  assert.throws(() => S.slotIndex(undefined, ["lg"]), /no slot lg/);
});
