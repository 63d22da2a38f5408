// What the presenter console and the lesson window accept from each other
// (paged/viz/player/console.js): a message from another window is hostile until checked.
const test = require("node:test");
const assert = require("node:assert/strict");
const { readMessage } = require("../../paged/viz/player/console.js");

const frame = (from, n, content = "lesson-1") => ({ type: "pk-frame", from, content, frame: n });

test("a lesson window follows its console's frame, and a console its lesson window's", () => {
  assert.equal(readMessage(frame("console", 12), false, "lesson-1"), 12);
  assert.equal(readMessage(frame("lesson", 12), true, "lesson-1"), 12);
});

test("two lesson windows, or two consoles, never drive each other", () => {
  assert.equal(readMessage(frame("lesson", 12), false, "lesson-1"), null);
  assert.equal(readMessage(frame("console", 12), true, "lesson-1"), null);
});

test("a frame of another lesson is not followed", () => {
  assert.equal(readMessage(frame("console", 3, "other"), false, "lesson-1"), null);
  assert.equal(readMessage(frame("console", 3, undefined), false, undefined), null);
});

test("only a console's hello makes a lesson window speak", () => {
  assert.equal(readMessage({ type: "pk-hello" }, false, "lesson-1"), "hello");
  assert.equal(readMessage({ type: "pk-hello" }, true, "lesson-1"), null);
});

test("anything but a whole frame number is refused", () => {
  for (const n of [-1, 2.5, "3", 2 ** 53, Number.NaN, null]) {
    assert.equal(readMessage(frame("console", n), false, "lesson-1"), null, String(n));
  }
  for (const m of [null, "pk-frame", 7, [], { type: 1 }, { type: "pk-other", frame: 1 }]) {
    assert.equal(readMessage(m, false, "lesson-1"), null, JSON.stringify(m));
  }
});
