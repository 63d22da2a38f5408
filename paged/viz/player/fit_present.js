// Drawing, part two: presenter mode at a projector. The grids' labels grow to --pk-grid-min px
// and the panels are condensed to the screen's height; Space and + / − say what they did.
// Methods of the Player (player.js mixes them in), as fit_rows.js.

// No text with a line box under 17 px in presenter mode. An HTML line of 15 px type is
// 17.5 px; an SVG label's box is only about 1.07 em, so the grids' labels are grown to
// 16.5 px (fitGridText). Both sizes are player.css's (--pk-min, --pk-grid-min): it says from
// which screen size up.
const CELL_UNITS = 18; // a cell's width (svg.py)
const LABEL_ROOM = 30; // the row labels' room (svg.py)
const FLASH_MS = 1200;
const ROW_LINE = 1.1; // row numbers at least this many ems apart: a label's box is 1.07 em
const COLUMN_GAP = 4; // units between two columns of row numbers
const FIRST_SCREEN_MARGIN = 8; // px left under the grids on a first screen
const MIN_GRID_PX = 200; // the least a grid is shrunk to for it // how long presenter mode shows what Space or + / − did

// A label's width in SVG units at ``size``, from DejaVu Sans's advances (the players' fallback
// and the widest of the fonts named): digits 0.64 em, '#' and '×' 0.84, CJK 1 em.
function textWidth(s, size, bold) {
  let w = 0;
  for (const c of s) {
    if (c.charCodeAt(0) > 0x2e80) w += 1;
    else if (/[0-9]/.test(c)) w += 0.64;
    else if (c === "." || c === "," || c === ":") w += 0.32;
    else if (c === "#" || c === "×" || /[A-Z]/.test(c)) w += 0.84;
    else w += 0.62;
  }
  return w * size * (bold ? 1.1 : 1);
}

// Text ``t`` (at ``size`` units) broken into lines of at most ``width`` units, as tspans one
// ``step`` apart; the number of lines.
function wrapText(t, size, width, step) {
  const lines = [];
  let line = "";
  // a line may break at a space or between two CJK characters
  for (const word of t.textContent.match(/[\u2e80-\uffff]|[^\s\u2e80-\uffff]+|\s+/g) || []) {
    const next = line + word;
    const bold = t.getAttribute("font-weight") === "700";
    if (line.trim() && textWidth(next.trim(), size, bold) > width) {
      lines.push(line.trim());
      line = word.trim();
    } else line = next;
  }
  if (line.trim()) lines.push(line.trim());
  if (lines.length < 2) return 1;
  const x = t.getAttribute("x") || "0";
  t.textContent = "";
  lines.forEach((l, k) => {
    const span = document.createElementNS(t.namespaceURI, "tspan");
    span.setAttribute("x", x);
    if (k) span.setAttribute("dy", step.toFixed(2));
    span.textContent = l;
    t.appendChild(span);
  });
  return lines.length;
}

// The distance between two rows' middles, in SVG units (Infinity with under two rows).
function rowPitch(svg) {
  const ys = [...svg.querySelectorAll("text.pk-rl")].map((t) => Number(t.dataset.cy));
  return ys.length > 1 ? ys[1] - ys[0] : Infinity;
}

// Whether a name of ``size`` units has room in a height of ``h`` (svg.py's data-h).
function nameFits(size, h) {
  return 1.1 * size <= h / 0.9;
}

// The widest row number of ``svg`` at ``size`` units.
function rowLabelWidth(svg, size) {
  const ws = [...svg.querySelectorAll("text.pk-rl")].map((t) => textWidth(t.textContent, size));
  return Math.max(0, ...ws);
}

const PresentFitting = {
  // Presenter mode's own fitting, redone on each frame (its grids and panels are new pieces)
  // and on each resize: the grids' labels grown to --pk-grid-min px, the panels condensed to fit.
  fitPresent() {
    this.fitGridText();
    this.fitPanels();
  },

  // The grids are SVG scaled to their box, so at a 1280x720 projector a 10-unit label is
  // 10-12 px. In presenter mode each label is grown to --pk-grid-min px: a request's name
  // starts at its cell and runs over its owner's room in the row (narrowed down to 3/4 at
  // most, else left out: the block table beside says the same), a ref count ends at its
  // cell's right edge, row numbers are kept a label's height apart (in two columns where
  // that numbers more rows) and the grid's left margin widened for them, and lines under the
  // grid wrap at its width. A grid is fitted
  // once per frame and scale; one fitted at another scale, and every grid out of presenter
  // mode, is first put back as the server drew it.
  fitGridText() {
    const slots = { "pk-lg": "lg", "pk-rg": "rg" };
    // out of presenter mode the labels still grow, to a reader's --pk-grid-normal px
    const least =
      parseFloat(
        getComputedStyle(this.root).getPropertyValue(
          this.present ? "--pk-grid-min" : "--pk-grid-normal",
        ),
      ) || 0;
    const sides = [];
    for (const id of Object.keys(slots)) {
      const holder = this.el(id);
      const svg = holder.querySelector("svg.pk-arena");
      if (!svg) continue;
      const redraw = () => {
        holder.innerHTML = this.pieces[this.frames[this.i][this.slot[slots[id]]]];
        return holder.querySelector("svg.pk-arena");
      };
      if (!least) {
        if (svg.dataset.fit && this.frames && this.i >= 0) redraw();
        continue;
      }
      if (!this.present) this.fitFirstScreen(svg);
      const box = svg.getBoundingClientRect();
      if (!box.width || !box.height) continue;
      const vb = (svg.dataset.vb || svg.getAttribute("viewBox")).split(" ").map(Number);
      sides.push({ svg, redraw, box, vb });
    }
    if (!sides.length) return;
    // Both sides are drawn at one scale (the server draws their grids alike, payload.py): the
    // same room is made on the left and below on both.
    const vb = sides[0].vb;
    const scale = (w, h) =>
      Math.min(...sides.map((s) => Math.min(s.box.width / w, s.box.height / h)));
    // Room for the grown row numbers. Where rows are closer than a number is tall (fp8's
    // half-height rows) a second column gives every row its number, if the wider margin
    // leaves the grids big enough for it and for the names that fitted in one column.
    const margin = (columns) => {
      let u = least / scale(vb[2], vb[3]);
      let extra = 0;
      for (let pass = 0; pass < 3; pass++) {
        const wide = Math.max(0, ...sides.map((s) => rowLabelWidth(s.svg, u)));
        extra = Math.max(0, columns * wide + (columns - 1) * COLUMN_GAP - LABEL_ROOM + 2);
        u = least / scale(vb[2] + extra, vb[3]);
      }
      return { u, extra, columns };
    };
    const one = margin(1);
    const pitch = Math.min(...sides.map((s) => rowPitch(s.svg)));
    const two = pitch < ROW_LINE * one.u ? margin(2) : null;
    const fitted = Math.min(
      ...sides.flatMap((s) =>
        [...s.svg.querySelectorAll("text.pk-nm")]
          .map((t) => Number(t.dataset.h))
          .filter((h) => nameFits(one.u, h)),
      ),
    );
    const pick = two && 2 * pitch >= ROW_LINE * two.u && nameFits(two.u, fitted) ? two : one;
    const { extra, columns } = pick;
    let u = pick.u;
    const key = `${u.toFixed(3)}/${columns}`;
    if (sides.every((s) => s.svg.dataset.fit === key)) return;
    // Lines wrapped under a grid make both taller, so smaller where the height limits them:
    // fitted again at the size that leaves, at most twice.
    for (let pass = 0; pass < 3; pass++) {
      let tall = vb[3];
      for (const s of sides) {
        if (s.svg.dataset.fit) s.svg = s.redraw();
        s.svg.dataset.fit = key;
        s.svg.dataset.vb = vb.join(" ");
        s.svg.setAttribute("viewBox", [vb[0] - extra, vb[1], vb[2] + extra, vb[3]].join(" "));
        this.growLabels(s.svg, u, vb, columns);
        this.fitUnder(s.svg, u);
        tall = Math.max(tall, Number(s.svg.getAttribute("viewBox").split(" ")[3]));
      }
      for (const s of sides) {
        s.svg.setAttribute("viewBox", [vb[0] - extra, vb[1], vb[2] + extra, tall].join(" "));
      }
      const got = u * scale(vb[2] + extra, tall);
      if (got >= least - 0.01) break;
      u *= least / got;
    }
    // the grids' labels moved without the page's size changing: the callouts' sentences
    // (point.js) are placed again, clear of them
    if (this.pt) ptPlace(this);
  },

  // Out of presenter mode a grid ends where the first screen does (the page scrolled to its
  // top): a newcomer sees both grids whole under the steps and the caption without scrolling
  // or knowing F. Never under MIN_GRID_PX: a short window scrolls to its grids instead.
  fitFirstScreen(svg) {
    let top = svg.getBoundingClientRect().top + window.scrollY;
    for (let e = svg.parentElement; e; e = e.parentElement) top += e.scrollTop;
    const drawn = Number(svg.dataset.maxh || parseFloat(svg.style.maxHeight) || Infinity);
    svg.dataset.maxh = drawn;
    const room = window.innerHeight - top - FIRST_SCREEN_MARGIN;
    svg.style.maxHeight = `${Math.min(drawn, Math.max(room, MIN_GRID_PX))}px`;
  },

  // ``columns``: how many columns of row numbers the grid's left margin was widened for.
  growLabels(svg, u, vb, columns = 1) {
    const rows = [];
    for (const t of svg.querySelectorAll("text")) {
      const size = Math.max(Number(t.getAttribute("font-size")), u);
      t.setAttribute("font-size", size.toFixed(2));
      const w = textWidth(t.textContent, size, t.getAttribute("font-weight") === "700");
      if (t.classList.contains("pk-rl")) rows.push(t);
      else if (t.classList.contains("pk-nm") || t.classList.contains("pk-rc")) {
        const x0 = Number(t.dataset.x0);
        // a name taller than its row (fp8's half-height rows) stays inside the grid's top
        const y = Math.max(Number(t.dataset.cy) + 0.36 * size, vb[1] + 0.95 * size);
        t.setAttribute("y", y.toFixed(2));
        t.removeAttribute("textLength");
        t.removeAttribute("lengthAdjust");
        // a row too short for the grown label's box (a quarter-height row, or a grid drawn
        // small) shows no names: they would run into the next row's
        let show = nameFits(size, Number(t.dataset.h));
        if (t.classList.contains("pk-rc")) {
          t.setAttribute("x", x0 + CELL_UNITS - 1);
          t.setAttribute("text-anchor", "end");
        } else if (w <= CELL_UNITS - 1) {
          t.setAttribute("x", x0 + CELL_UNITS / 2);
          t.setAttribute("text-anchor", "middle");
        } else {
          const room = Number(t.dataset.room);
          t.setAttribute("x", x0 + 1.5);
          t.setAttribute("text-anchor", "start");
          if (w > room) {
            show = show && room >= 0.75 * w;
            t.setAttribute("textLength", room);
            t.setAttribute("lengthAdjust", "spacingAndGlyphs");
          }
        }
        t.style.display = show ? "" : "none";
      }
    }
    this.placeRowNumbers(svg, rows.reverse(), vb, columns);
  },

  // Every row's number where the rows are a label apart; rows closer than that take turns
  // between ``columns`` columns, and a row with room in none has none. Placed from the last
  // row up: the first row's number, pushed down inside the grid's top margin, is the one
  // left out, not its two neighbours.
  placeRowNumbers(svg, rows, vb, columns) {
    const last = [Infinity, Infinity];
    const wide = rows.length ? rowLabelWidth(svg, Number(rows[0].getAttribute("font-size"))) : 0;
    for (const t of rows) {
      const size = Number(t.getAttribute("font-size"));
      // on its row's middle, its top inside the grid's top margin
      const y = Math.max(Number(t.dataset.cy) + 0.36 * size, vb[1] + 0.95 * size);
      const col = [0, 1].find((k) => k < columns && last[k] - y >= ROW_LINE * size);
      t.setAttribute("y", y.toFixed(2));
      if (t.dataset.x === undefined) t.dataset.x = t.getAttribute("x");
      const x = Number(t.dataset.x) - (col === 1 ? wide + COLUMN_GAP : 0);
      t.setAttribute("x", x.toFixed(2));
      t.style.display = col === undefined ? "none" : "";
      if (col !== undefined) last[col] = y;
    }
  },

  // Under a grid: the CPU tier's title and the scale note, grown to ``size`` units, wrap at
  // the grid's width (they were narrowed to it), what follows them moves down, and the grid
  // is made taller for them.
  fitUnder(svg, size) {
    const vb = svg.getAttribute("viewBox").split(" ").map(Number);
    const width = vb[0] + vb[2] - 2,
      step = 1.25 * size;
    let shift = 0;
    const cpu = svg.querySelector("g.pk-cpu");
    if (cpu?.firstElementChild) {
      const n = wrapText(cpu.firstElementChild, size, width, step);
      if (n > 1) {
        shift = (n - 1) * step;
        const g = document.createElementNS(svg.namespaceURI, "g");
        g.setAttribute("transform", `translate(0,${shift.toFixed(2)})`);
        while (cpu.firstElementChild.nextSibling) g.appendChild(cpu.firstElementChild.nextSibling);
        cpu.appendChild(g);
      }
    }
    const note = svg.querySelector("g.pk-scale");
    if (note) {
      const lines = [...note.querySelectorAll("text")];
      let y = Number(lines[0].getAttribute("y")) - 11 + shift;
      for (const t of lines) {
        t.removeAttribute("textLength");
        t.removeAttribute("lengthAdjust");
        t.setAttribute("y", (y + 0.95 * size).toFixed(2));
        y += wrapText(t, size, width, step) * step;
      }
    }
    const bb = svg.getBBox();
    if (bb.y + bb.height + 3 > vb[1] + vb[3]) {
      svg.setAttribute("viewBox", [vb[0], vb[1], vb[2], bb.y + bb.height + 3 - vb[1]].join(" "));
    }
  },

  // Presenter mode shows each side's block tables (or reservations) and queue beside its
  // grid. Where they do not fit the screen's height, the rows this frame left unchanged go
  // first (from the last, with the finished list), counted in one line; the rows the frame
  // changed, and the queue with its blocked requests' reasons, always stay.
  fitPanels() {
    for (const id of ["pk-lp", "pk-rp"]) {
      const box = this.el(id);
      const rest = box.querySelector(".pk-rest");
      for (const e of box.querySelectorAll(".pk-cut")) e.classList.remove("pk-cut");
      if (rest) rest.hidden = true;
      if (!this.present || !box.clientHeight) continue;
      const over = () => box.scrollHeight > box.clientHeight + 1;
      if (!over()) continue;
      const done = box.querySelector(".pk-done");
      if (done) done.classList.add("pk-cut");
      // the request pointed at keeps its rows: its arrows start from them (point.js)
      const focus = this.pt ? this.pt.focus : null;
      const rows = [...box.querySelectorAll(".pk-tables > .pk-row:not(.pk-hot)")]
        .filter((r) => r.dataset.req !== focus)
        .reverse();
      let cut = 0;
      for (const r of rows) {
        if (!over()) break;
        r.classList.add("pk-cut");
        cut += 1;
        if (rest) {
          rest.textContent = rest.dataset.t.replace("{n}", cut);
          rest.hidden = false;
        }
      }
      // still too long: the changed rows keep only their changed entries
      if (over()) {
        box.querySelectorAll(".pk-hot .pk-map:not(.new)").forEach((m) => {
          if (m.closest(".pk-row").dataset.req !== focus) m.classList.add("pk-cut");
        });
      }
    }
  },

  // Space and + / − change what presenter mode does not show (the play button and the speed
  // are hidden there): say for a moment what they did.
  flash() {
    const f = this.el("pk-flash");
    if (!f || !this.present) return;
    f.textContent = (this.playing ? "▶ " : "❚❚ ") + this.el("pk-speed").textContent;
    f.hidden = false;
    clearTimeout(this.flashTimer);
    this.flashTimer = setTimeout(() => {
      f.hidden = true;
    }, FLASH_MS);
  },

  // A projector theme: light on dark and at full contrast, for a washed-out projector.
  // Kept for the next lesson opened in this browser.
  setTheme(on) {
    this.theme = on;
    this.root.classList.toggle("pk-hc", on);
    this.root.dataset.theme = on ? "hc" : "";
    try {
      window.localStorage.setItem("pk-theme", on ? "hc" : "");
    } catch (_) {
      /* none */
    }
  },
};

if (typeof module === "object") module.exports = { textWidth, wrapText, PresentFitting };
