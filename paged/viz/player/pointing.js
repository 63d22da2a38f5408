// Pointing at a request: hovering or tabbing to any of its cells, rows or chips lights it up
// everywhere, and arrows run from its block-table entries to the blocks they name; each of
// the frame's callouts gets its sentence beside its outline. The server drew all of it
// (svg.py marks whose each cell is and which block it is, html.py which block each table
// entry names, render/point.py the callouts); where those lie on screen only the browser
// knows. The choices are pure functions (tests/js); the rest places them.

const PT_BLOCK = /^[0-9]{1,9}$/; // a block number, as the server writes it
const PT_GAP = 6; // px between a callout's outline and its sentence

// The arrows a request in focus draws, from table entries [{ own, blocks }] (each entry's
// request, the block numbers it names): one per block the request holds, from every entry
// naming that block, its own or another request's (a shared prefix, parallel samples: three
// tables, one block, three arrows in). Each is [entry index, block, from its own entry].
function arrowsFor(entries, focus) {
  const mine = new Set(entries.filter((e) => e.own === focus).flatMap((e) => e.blocks));
  const out = [];
  entries.forEach((e, k) => {
    for (const b of e.blocks) if (mine.has(b)) out.push([k, b, e.own === focus]);
  });
  return out;
}

// The block numbers a table entry names (one, or several where a table folds them into
// "…"), less anything that is not one.
function blockNumbers(raw) {
  return raw.filter((b) => PT_BLOCK.test(b));
}

// R / shift+R (dir 1 / -1) among the requests on screen, in order: the next one after the
// request in focus, the first (or last) from none, and none past either end. Undefined: there
// is no request to point at.
function nextRequest(seen, focus, dir) {
  if (!seen.length) return undefined;
  const at = seen.indexOf(focus);
  const n = at < 0 ? (dir > 0 ? 0 : seen.length - 1) : at + dir;
  return n >= 0 && n < seen.length ? seen[n] : null;
}

// Where a callout's sentence (w x h px) goes: above its outline ``at`` when the grid's box
// ``room`` has room there, else under it, kept inside the box's width, clear of any sentence
// already ``placed`` and of the labels to ``avoid`` (a sentence drawn over the block labels it
// talks about hid them). Places nearer the outline are tried first, stepping away from it up
// and down the box and across it; where none is clear, under the sentences it would overlap.
// Boxes are { l, t, r, b }.
function placeNote(at, room, w, h, placed, avoid = []) {
  const left = Math.max(room.l, Math.min(at.l, room.r - w));
  const above = at.t - h - PT_GAP;
  const first = above >= room.t ? above : at.b + PT_GAP;
  const hits = (b, q) => b.l < q.r && q.l < b.r && b.t < q.b && q.t < b.b;
  const clear = (b) => !placed.some((q) => hits(b, q)) && !avoid.some((q) => hits(b, q));
  const box = (l, t) => ({ l, t, r: l + w, b: t + h });
  const step = Math.max(4, h / 2);
  // off the outline first, then anywhere in the box: an outline may cover most of the grid
  const tops = [first, above, at.b + PT_GAP];
  for (let t = room.t; t + h <= room.b; t += step) tops.push(t);
  tops.push(room.b - h);
  const lefts = [left];
  for (let l = room.l; l + w <= room.r; l += step) lefts.push(l);
  const near = (b) => Math.hypot((b.l + b.r - at.l - at.r) / 2, (b.t + b.b - at.t - at.b) / 2);
  const seen = tops
    .filter((t) => t >= room.t && t + h <= room.b)
    .flatMap((t) => lefts.map((l) => box(l, t)));
  // the first place is the one it always had, where it is clear
  const best = seen.length && clear(seen[0]) ? seen[0] : null;
  const ok = best || seen.filter(clear).sort((a, b) => near(a) - near(b))[0];
  if (ok) return ok;
  let top = first;
  for (const q of placed) {
    if (left < q.r && q.l < left + w && top < q.b && q.t < top + h) top = q.b + 2;
  }
  return box(left, top);
}

// The request a page element stands for (cells, rows, chips), or null.
function ptReqOf(p, el) {
  const hit = el?.closest ? el.closest("[data-req]") : null;
  return hit && p.root.contains(hit) ? hit.dataset.req : null;
}

function ptFocus(p, req, kbd) {
  const pt = p.pt;
  if (pt.still) return; // pointing is for a person: never in a photographed frame
  pt.kbd = req !== null && kbd;
  if (pt.focus === req) return;
  pt.focus = req;
  ptMark(p);
  if (p.present) p.fitPanels(); // a condensed panel gives the request's rows back
  ptArrows(p);
}

// Light up every cell, row, chip and block of the request in focus; dim the rest.
function ptMark(p) {
  const pt = p.pt;
  const req = pt.focus;
  p.root.dataset.focus = req === null ? "" : "1";
  for (const e of p.root.querySelectorAll(".pk-on")) e.classList.remove("pk-on");
  if (req === null) return;
  for (const e of p.root.querySelectorAll("[data-req]")) {
    if (e.dataset.req === req) e.classList.add("pk-on");
  }
  // keyboard focus moves with the frames: the new frame's chip for the request takes it
  if (pt.kbd && !p.root.contains(document.activeElement)) {
    const chip = [...p.root.querySelectorAll("[data-req][tabindex]")].find(
      (e) => e.dataset.req === req,
    );
    if (chip) chip.focus({ preventScroll: true });
  }
}

// R / shift+R: the next / previous request holding memory or queued on this frame, then none.
function ptNextRequest(p, dir) {
  const seen = [];
  for (const e of p.root.querySelectorAll(
    "#pk-lp [data-req], #pk-rp [data-req], #pk-lg [data-req], #pk-rg [data-req]",
  )) {
    if (!seen.includes(e.dataset.req)) seen.push(e.dataset.req);
  }
  const req = nextRequest(seen, p.pt.focus, dir);
  // a key's choice holds until the mouse points at another request
  if (req !== undefined) ptFocus(p, req, true);
}

// Everything placed on screen by position: arrows and callout sentences.
function ptPlace(p) {
  ptArrows(p);
  ptCallouts(p);
}

function ptBox(el, origin) {
  const r = el.getBoundingClientRect();
  return {
    l: r.left - origin.left,
    t: r.top - origin.top,
    r: r.right - origin.left,
    b: r.bottom - origin.top,
    w: r.width,
    h: r.height,
  };
}

// The arrows of the request in focus (arrowsFor), from each table entry to the physical
// block on the grid. An entry the table folds into "…" starts its arrow at the "…". Paging
// only: a contiguous run has no table, and its cells light up instead. None while photographed.
function ptArrows(p) {
  const pt = p.pt;
  pt.arrows.replaceChildren();
  for (const e of p.root.querySelectorAll("rect.pk-blk-on")) e.classList.remove("pk-blk-on");
  if (pt.focus === null || pt.still) return;
  const origin = pt.layer.getBoundingClientRect();
  for (const side of ["l", "r"]) {
    const panel = p.el(`pk-${side}p`);
    const grid = p.el(`pk-${side}g`);
    const els = [
      ...panel.querySelectorAll(".pk-row[data-req] [data-block], .pk-row[data-req] [data-blocks]"),
    ];
    const entries = els.map((e) => ({
      own: e.closest("[data-req]").dataset.req,
      blocks: blockNumbers(
        e.dataset.block !== undefined ? [e.dataset.block] : e.dataset.blocks.split(" "),
      ),
    }));
    for (const [k, b, own] of arrowsFor(entries, pt.focus)) {
      const target = grid.querySelector(`rect[data-block='${b}']`);
      if (!target) continue;
      target.classList.add("pk-blk-on");
      const from = ptBox(els[k], origin);
      const to = ptBox(target, origin);
      if (!from.w || !to.w) continue; // not on screen (a panel presenter mode leaves out)
      ptArrow(pt, from, to, entries[k].own, b, own);
    }
  }
}

function ptArrow(pt, from, to, req, block, own) {
  // from the entry's side facing the block to the block's nearest vertical edge
  const right = from.l >= to.r;
  const sx = right ? from.l : from.r;
  const sy = (from.t + from.b) / 2;
  const ex = right ? to.r : to.l;
  const ey = (to.t + to.b) / 2;
  const bend = Math.max(30, Math.abs(sx - ex) / 3) * (right ? -1 : 1);
  const path = document.createElementNS(pt.arrows.namespaceURI, "path"); // the SVG one
  const f = (v) => v.toFixed(1);
  path.setAttribute(
    "d",
    `M${f(sx)},${f(sy)}C${f(sx + bend)},${f(sy)} ${f(ex - bend)},${f(ey)} ${f(ex)},${f(ey)}`,
  );
  path.setAttribute("class", `pk-pt-arrow${own ? "" : " pk-pt-shared"}`);
  path.setAttribute("marker-end", "url(#pk-pt-head)");
  path.dataset.req = req;
  path.dataset.block = block;
  pt.arrows.appendChild(path);
}

// Each callout's sentence (the server's, in data-say) beside its dashed outline (placeNote);
// sentences never overlap.
function ptCallouts(p) {
  const pt = p.pt;
  pt.notes.replaceChildren();
  const outlines = [...p.root.querySelectorAll("#pk-lg .pk-callout, #pk-rg .pk-callout")];
  if (!outlines.length) return;
  const origin = pt.layer.getBoundingClientRect();
  const placed = [];
  for (const g of outlines) {
    const at = ptBox(g.querySelector("path") || g, origin);
    const gridEl = g.closest(".pk-side-grid");
    if (!at.w || !gridEl) continue;
    const note = document.createElement("div");
    note.className = "pk-pt-note";
    note.dataset.kind = g.dataset.kind || "";
    note.textContent = g.dataset.say || "";
    pt.notes.appendChild(note);
    // the grid's own labels (names, row numbers, the lines under it) stay readable
    const labels = [...gridEl.querySelectorAll("svg text")]
      .filter((t) => getComputedStyle(t).display !== "none")
      .map((t) => ptBox(t, origin))
      .filter((b) => b.w > 0);
    const room = ptBox(gridEl, origin);
    const box = placeNote(at, room, note.offsetWidth, note.offsetHeight, placed, labels);
    note.style.left = `${box.l.toFixed(1)}px`;
    note.style.top = `${box.t.toFixed(1)}px`;
    placed.push(box);
  }
}

if (typeof module === "object") {
  module.exports = {
    arrowsFor,
    blockNumbers,
    nextRequest,
    placeNote,
    ptReqOf,
    ptFocus,
    ptNextRequest,
    ptPlace,
    ptBox,
  };
}
