// Exercise mode's logic (paged/viz/player/exercise.js), without a browser: where the player
// stops, what a key or a typed line answers, grading, and a click mapped to a cell.
const test = require("node:test");
const assert = require("node:assert/strict");
const X = require("../../paged/viz/player/exercise.js");

const YESNO = {
  id: "q0",
  frame: 3,
  form: "yesno",
  choices: [
    { value: "yes", label: "yes" },
    { value: "no", label: "no" },
  ],
  answer: "no",
};
const CHOOSE = {
  id: "q1",
  frame: 3,
  form: "choose",
  choices: ["A", "B", "C"].map((v) => ({ value: v, label: v })),
  answer: "C",
};
const NUMBER = { id: "q2", frame: 8, form: "number", choices: [], answer: 112 };
const CELLS = { id: "q3", frame: 12, form: "cells", unit: "block", cells: 16, answer: [0, 1, 2] };
const ALL = [YESNO, CHOOSE, NUMBER, CELLS];

test("the questions open at a frame are the ones asked there and not yet answered", () => {
  assert.deepEqual(
    X.openAt(ALL, new Map(), 3).map((q) => q.id),
    ["q0", "q1"],
  );
  assert.deepEqual(
    X.openAt(ALL, new Map([["q0", {}]]), 3).map((q) => q.id),
    ["q1"],
  );
  assert.deepEqual(X.openAt(ALL, new Map(), 4), []);
  assert.deepEqual(X.openAt(undefined, new Map(), 3), []);
});

test("a step forward stops at the first open question on the way, a step back never", () => {
  const none = new Map();
  assert.equal(X.stopAt(ALL, none, 0, 20), 3);
  assert.equal(X.stopAt(ALL, none, 3, 20), 8); // already at 3: the next one on
  assert.equal(X.stopAt(ALL, new Map([["q2", {}]]), 3, 20), 12);
  assert.equal(X.stopAt(ALL, none, 4, 6), 6);
  assert.equal(X.stopAt(ALL, none, 15, 2), 2);
});

test("number keys pick the nth choice and y / n answer a yes-or-no question only", () => {
  assert.equal(X.keyAnswer(YESNO, "y"), "yes");
  assert.equal(X.keyAnswer(YESNO, "N"), "no");
  assert.equal(X.keyAnswer(YESNO, "2"), "no");
  assert.equal(X.keyAnswer(CHOOSE, "3"), "C");
  assert.equal(X.keyAnswer(CHOOSE, "4"), undefined);
  assert.equal(X.keyAnswer(CHOOSE, "y"), undefined);
  assert.equal(X.keyAnswer(NUMBER, "1"), undefined);
});

test("a typed number is a whole number or nothing", () => {
  assert.equal(X.parseNumber(" 112 "), 112);
  assert.equal(X.parseNumber("-3"), -3);
  for (const junk of ["", "1.5", "12a", "1e3", "x".repeat(500), "9".repeat(20)]) {
    assert.equal(X.parseNumber(junk), null, junk);
  }
});

test("typed cells are read as numbers of the grid, sorted and once each, or refused", () => {
  assert.deepEqual(X.parseCells("#2, 0 1;1", 16), [0, 1, 2]);
  assert.deepEqual(X.parseCells("", 16), []);
  assert.equal(X.parseCells("16", 16), null);
  assert.equal(X.parseCells("3, <b>", 16), null);
  assert.equal(X.parseCells("-1", 16), null);
});

test("grading: the exact choice, the exact number, the same set of cells", () => {
  assert.equal(X.isRight(YESNO, "no"), true);
  assert.equal(X.isRight(YESNO, "yes"), false);
  assert.equal(X.isRight(NUMBER, 112), true);
  assert.equal(X.isRight(NUMBER, "112"), false);
  assert.equal(X.isRight(CELLS, [2, 1, 0]), true);
  assert.equal(X.isRight(CELLS, [0, 1]), false);
  assert.equal(X.isRight(CELLS, [0, 1, 2, 3]), false);
  assert.equal(X.isRight(CELLS, [0, 1, 2.5]), false);
  assert.equal(X.isRight(CELLS, undefined), false);
});

// a grid drawn as svg.grid_geometry says: 8 slots a row, blocks of 4
const GRID = { x0: 34, cell: 20, pitch: 20, gap: 2, cols: 8, per: 4 };

test("a click lands on the block (or slot) drawn under it, and off the grid on none", () => {
  assert.equal(X.cellAt(GRID, 16, 34 + 5, 5), 0);
  assert.equal(X.cellAt(GRID, 16, 34 + 4 * 20 + 1, 5), 1); // fifth column: the second block
  assert.equal(X.cellAt(GRID, 16, 34 + 20, 2 * 20 + 3), 4); // third row, first block
  assert.equal(X.cellAt(GRID, 16, 10, 5), -1); // the row labels
  assert.equal(X.cellAt(GRID, 16, 34 + 5, 8 * 20 + 1), -1); // past the last block
  assert.equal(X.cellAt({ ...GRID, per: 1 }, 64, 34 + 3 * 20 + 1, 20 + 1), 11);
});

test("the box drawn round a cell covers exactly the cells a click maps to it", () => {
  for (const k of [0, 1, 5, 15]) {
    const b = X.cellBox(GRID, k);
    assert.equal(X.cellAt(GRID, 16, b.x + 1, b.y + 1), k);
    assert.equal(X.cellAt(GRID, 16, b.x + b.w - 1, b.y + b.h - 1), k);
  }
});

test("an answer reads as its label, a block as #n, a slot in words; typed text is escaped", () => {
  const words = { ex_slot: "slot {n}" };
  assert.equal(X.answerHtml(CHOOSE, "C", words), "C");
  assert.equal(X.answerHtml(CELLS, [0, 2], words), "#0, #2");
  assert.equal(X.answerHtml({ ...CELLS, unit: "slot" }, [13], words), "slot 13");
  assert.equal(X.answerHtml(YESNO, "<img>", words), "&lt;img&gt;");
  assert.equal(X.answerHtml(CELLS, undefined, words), "–");
});

test("the score counts answers right out of every question asked", () => {
  const done = new Map([
    ["q0", { right: true }],
    ["q1", { right: false }],
  ]);
  assert.deepEqual(X.tally(ALL, done), { right: 1, answered: 2, total: 4 });
  assert.equal(
    X.fill("Score: {right} of {total}, {nope}", X.tally(ALL, done)),
    "Score: 1 of 4, {nope}",
  );
});
