// What pointing at a request selects (paged/viz/player/pointing.js), without a browser.
const test = require("node:test");
const assert = require("node:assert/strict");
const P = require("../../paged/viz/player/pointing.js");

// Request a holds blocks 1 and 2; b shares block 2 (a common prefix) and holds 5; c holds 9.
const ENTRIES = [
  { own: "a", blocks: ["1"] },
  { own: "a", blocks: ["2"] },
  { own: "b", blocks: ["2", "5"] },
  { own: "c", blocks: ["9"] },
];

test("a request's arrows run from each of its entries, and from others naming its blocks", () => {
  assert.deepEqual(P.arrowsFor(ENTRIES, "a"), [
    [0, "1", true],
    [1, "2", true],
    [2, "2", false],
  ]);
});

test("a request that shares a block gets the arrow in from its owner's entry too", () => {
  assert.deepEqual(P.arrowsFor(ENTRIES, "b"), [
    [1, "2", false],
    [2, "2", true],
    [2, "5", true],
  ]);
});

test("nothing pointed at, or a request with no table, draws no arrow", () => {
  assert.deepEqual(P.arrowsFor(ENTRIES, null), []);
  assert.deepEqual(P.arrowsFor(ENTRIES, "z"), []);
});

test("only block numbers become arrows, not the ellipsis or anything else a page holds", () => {
  assert.deepEqual(P.blockNumbers(["0", "42", "…", "12a", "1234567890", "", "3"]), [
    "0",
    "42",
    "3",
  ]);
});

test("R walks the requests on screen in order, then points at none", () => {
  const seen = ["r1", "r2", "r3"];
  assert.equal(P.nextRequest(seen, null, 1), "r1");
  assert.equal(P.nextRequest(seen, "r1", 1), "r2");
  assert.equal(P.nextRequest(seen, "r3", 1), null);
  assert.equal(P.nextRequest(seen, null, -1), "r3");
  assert.equal(P.nextRequest(seen, "r1", -1), null);
  assert.equal(P.nextRequest(seen, "gone", 1), "r1"); // its request finished on this frame
  assert.equal(P.nextRequest([], null, 1), undefined);
});

const ROOM = { l: 0, t: 0, r: 400, b: 300 };

test("a callout's sentence goes above its outline where the grid has room", () => {
  const box = P.placeNote({ l: 50, t: 100, r: 80, b: 130 }, ROOM, 120, 20, []);
  assert.deepEqual(box, { l: 50, t: 74, r: 170, b: 94 });
});

test("under its outline where there is no room above, and inside the grid's width", () => {
  const box = P.placeNote({ l: 350, t: 10, r: 390, b: 40 }, ROOM, 120, 20, []);
  assert.equal(box.t, 46);
  assert.equal(box.r, ROOM.r);
});

test("two sentences never overlap: the second goes under the first", () => {
  const first = P.placeNote({ l: 50, t: 100, r: 80, b: 130 }, ROOM, 120, 20, []);
  const second = P.placeNote({ l: 90, t: 105, r: 120, b: 135 }, ROOM, 120, 20, [first]);
  assert.ok(second.t >= first.b, JSON.stringify({ first, second }));
});

test("a sentence is never drawn over a label of its grid: it moves to the nearest clear place", () => {
  const outline = { l: 50, t: 100, r: 80, b: 130 };
  const label = { l: 40, t: 70, r: 90, b: 96 }; // where the sentence would go above
  const box = P.placeNote(outline, ROOM, 120, 20, [], [label]);
  const hits = (a, b) => a.l < b.r && b.l < a.r && a.t < b.b && b.t < a.b;
  assert.ok(!hits(box, label), JSON.stringify(box));
  assert.ok(box.t >= ROOM.t && box.b <= ROOM.b && box.l >= ROOM.l && box.r <= ROOM.r);
  assert.ok(Math.abs(box.t - outline.t) < 60, JSON.stringify(box)); // still beside its outline
});
