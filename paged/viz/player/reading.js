// "How to read this screen" (H, and once on a first visit): the server's page of colours,
// marks and numbered panels (point.py reading_page), with each panel's number set on the
// panel itself. Panels not on screen (presenter mode leaves some out) get none. Any key or
// click closes it.

const PT_SEEN = "pk-read-seen"; // localStorage: the reading page was shown once

function ptSeen() {
  try {
    return window.localStorage.getItem(PT_SEEN) === "1";
  } catch (_) {
    return true;
  }
}

function ptRead(p, show) {
  const read = p.pt.read;
  read.hidden = !show;
  p.root.dataset.read = show ? "1" : "0";
  for (const e of read.querySelectorAll(".pk-read-num")) e.remove();
  if (!show) return;
  try {
    window.localStorage.setItem(PT_SEEN, "1");
  } catch (_) {
    /* private mode: ask again */
  }
  ptReadNumbers(p);
  // shown with the first frame, the rows above the grids are still being fitted: again once
  // they are (and the resize observer places them again on any later change)
  requestAnimationFrame(() => requestAnimationFrame(() => ptReadNumbers(p)));
}

// Where a panel is drawn: a grid's SVG is scaled to fit its box, so its drawing can be smaller
// than the box (a marker on the box's corner pointed at empty space); any other panel, its box.
function ptDrawn(box) {
  const svg = box.querySelector("svg.pk-arena, svg.pk-k-arena, svg.pk-k-tiles");
  const m = svg?.getScreenCTM();
  const vb = svg?.viewBox?.baseVal;
  if (!m || !vb?.width) return box.getBoundingClientRect();
  const x0 = m.a * vb.x + m.e,
    y0 = m.d * vb.y + m.f;
  const x1 = m.a * (vb.x + vb.width) + m.e,
    y1 = m.d * (vb.y + vb.height) + m.f;
  return { left: x0, top: y0, right: x1, bottom: y1, width: x1 - x0, height: y1 - y0 };
}

// The boxes of the player's visible text, which a marker must not cover.
function ptTextBoxes(p) {
  const out = [];
  const walk = document.createTreeWalker(p.root, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el || el.closest("svg, .pk-read, [hidden], .pk-sr")) continue;
    const range = document.createRange();
    range.selectNodeContents(n);
    for (const r of range.getClientRects()) if (r.width > 0.5) out.push(r);
  }
  for (const t of p.root.querySelectorAll("svg text")) {
    const r = t.getBoundingClientRect();
    if (r.width > 0.5 && getComputedStyle(t).display !== "none") out.push(r);
  }
  return out;
}

function ptReadNumbers(p) {
  const read = p.pt.read;
  for (const e of read.querySelectorAll(".pk-read-num")) e.remove();
  if (read.hidden) return;
  const placed = [];
  const origin = read.getBoundingClientRect();
  const card = read.firstElementChild ? read.firstElementChild.getBoundingClientRect() : null;
  const texts = ptTextBoxes(p);
  const meets = (x, y, w, h, q) => x < q.right && q.left < x + w && y < q.bottom && q.top < y + h;
  const under = (x, y, w, h) =>
    card && meets(x, y, w, h, { ...card.toJSON(), left: card.left - 4, top: card.top - 4 });
  for (const li of read.querySelectorAll("li[data-panel]")) {
    const box = p.el(li.dataset.panel);
    const shownBox = box?.getBoundingClientRect();
    const shown =
      shownBox?.width &&
      shownBox.height &&
      shownBox.bottom > 0 &&
      shownBox.top < window.innerHeight;
    li.classList.toggle("pk-off", !shown);
    if (!shown) continue;
    const r = ptDrawn(box);
    const num = document.createElement("span");
    num.className = "pk-read-num";
    num.textContent = li.querySelector("b").textContent;
    read.appendChild(num);
    const w = num.offsetWidth;
    const h = num.offsetHeight;
    // beside the panel (left of it, above it) before on it, and on it at a corner; never on
    // a text, the card or another marker, and on screen
    const spots = [
      [r.left - w - 4, r.top],
      [r.left, r.top - h - 2],
      [r.left + 4, r.top + 4],
      [r.right - w - 4, r.top + 4],
      [r.left + 4, r.bottom - h - 4],
      [r.right - w - 4, r.bottom - h - 4],
      [r.right + 4, r.top],
      [r.left, r.bottom + 2],
    ];
    const onScreen = ([x, y]) =>
      x >= 0 && y >= 0 && x + w <= window.innerWidth && y + h <= window.innerHeight;
    const apart = ([x, y]) =>
      !under(x, y, w, h) &&
      !placed.some(([px, py]) => x < px + w && px < x + w && y < py + h && py < y + h);
    const clear = (s) => onScreen(s) && apart(s) && !texts.some((q) => meets(s[0], s[1], w, h, q));
    // where none of those is clear: the first clear place on the drawing, row by row (a grid
    // has cells no label is written on)
    for (let y = r.top + 4; y + h <= r.bottom - 4; y += h / 2)
      for (let x = r.left + 4; x + w <= r.right - 4; x += w / 2) spots.push([x, y]);
    // a drawing the card hides: at the card's edge, in line with it, the nearest first
    if (card) {
      const edge = [];
      for (let x = r.left; x + w <= r.right; x += w / 2)
        edge.push([x, card.top - h - 6], [x, card.bottom + 6]);
      for (let y = r.top; y + h <= r.bottom; y += h / 2)
        edge.push([card.left - w - 6, y], [card.right + 6, y]);
      const gap = ([x, y]) => Math.max(r.left - x - w, x - r.right, r.top - y - h, y - r.bottom, 0);
      spots.push(...edge.sort((a, b) => gap(a) - gap(b)));
    }
    const [x, y] = spots.find(clear) || spots.find((s) => onScreen(s) && apart(s)) || spots[2];
    placed.push([x, y]);
    num.style.left = `${(x - origin.left).toFixed(1)}px`;
    num.style.top = `${(y - origin.top).toFixed(1)}px`;
  }
}

if (typeof module === "object") module.exports = { ptSeen, ptRead, ptReadNumbers };
