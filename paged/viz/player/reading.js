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

function ptReadNumbers(p) {
  const read = p.pt.read;
  for (const e of read.querySelectorAll(".pk-read-num")) e.remove();
  if (read.hidden) return;
  const placed = [];
  const origin = read.getBoundingClientRect();
  const card = read.firstElementChild ? read.firstElementChild.getBoundingClientRect() : null;
  const under = (x, y) =>
    card && x >= card.left - 4 && x <= card.right + 4 && y >= card.top - 4 && y <= card.bottom + 4;
  for (const li of read.querySelectorAll("li[data-panel]")) {
    const box = p.el(li.dataset.panel);
    const r = box?.getBoundingClientRect();
    const shown = r?.width && r.height && r.bottom > 0 && r.top < window.innerHeight;
    li.classList.toggle("pk-off", !shown);
    if (!shown) continue;
    const num = document.createElement("span");
    num.className = "pk-read-num";
    num.textContent = li.querySelector("b").textContent;
    read.appendChild(num);
    // on the panel's first corner the card leaves in view
    const w = num.offsetWidth;
    const h = num.offsetHeight;
    const corners = [
      [r.left + 4, r.top + 4],
      [r.right - w - 4, r.top + 4],
      [r.left + 4, r.bottom - h - 4],
      [r.right - w - 4, r.bottom - h - 4],
    ];
    const free = ([cx, cy]) =>
      !under(cx, cy) &&
      !under(cx + w, cy + h) &&
      !placed.some(([px, py]) => cx < px + w && px < cx + w && cy < py + h && py < cy + h);
    const [x, y] = corners.find(free) || corners[0];
    placed.push([x, y]);
    num.style.left = `${(x - origin.left).toFixed(1)}px`;
    num.style.top = `${(y - origin.top).toFixed(1)}px`;
  }
}

if (typeof module === "object") module.exports = { ptSeen, ptRead, ptReadNumbers };
