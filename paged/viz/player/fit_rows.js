// Drawing, part one: the rows above the grids, the timeline's step numbers, the page's height
// and the scoreboard, fitted so the grids hold still while one steps. Methods of the Player
// (player.js mixes them in); they measure what the server drew and draw nothing themselves.

// The rows above the grids whose text changes from frame to frame (see fitRows): [box id,
// frame record slot] per side; a chapter title and a side title come from data.
const ROWS = [
  [["pk-chapter", null]],
  [
    ["pk-cap-l", "lc"],
    ["pk-cap-r", "rc"],
  ],
  [
    ["pk-title-l", null],
    ["pk-title-r", null],
  ],
  [
    ["pk-lm", "lm"],
    ["pk-rm", "rm"],
  ],
];
const FIT_MAX = 40; // texts measured per box: the longest (a long run has thousands)
// The captions' row is held for the tallest caption only up to this share of the screen's
// height; past it, for the 10 % of frames with the longest captions, one long caption (six
// requests stopping in one step) pushes the grids down on its own frame instead.
const CAPTION_ROOM = 0.15;
const CAPTION_RARE = 0.1;

const RowFitting = {
  // The chapter title, the captions, the side titles and the metrics strips sit above the
  // grids, and their text wraps to more lines on some frames than on others: each row is held
  // as tall as its tallest text at this width, on both sides, so the grids neither move nor
  // resize under the lecturer's pointer, and both sides keep one scale (the captions up to a
  // share of the screen: CAPTION_ROOM). Measured once per width, font size and payload (off
  // screen, all at once); a key costs nothing.
  fitRows() {
    if (!this.frames) return;
    const key = [
      this.root.clientWidth,
      getComputedStyle(this.root).fontSize,
      this.data.id,
      this.data.lang,
      this.frames.length,
      window.innerHeight,
    ].join();
    if (key === this.fitted && !this.rowsStale) return;
    // On the scoreboard the sides are hidden: they are shown unseen while measured (no paint
    // in between), so stepping back to the grids finds its rows fitted and measures nothing
    // on that key (it cost the key 20-60 ms).
    const sides = this.el("pk-sides"),
      score = this.el("pk-score"),
      onScore = sides.hidden;
    if (onScore) {
      sides.style.visibility = "hidden";
      sides.hidden = false;
      score.hidden = true;
    }
    try {
      this.measureRows(key);
    } finally {
      if (onScore) {
        sides.hidden = true;
        score.hidden = false;
        sides.style.visibility = "";
      }
    }
  },

  measureRows(key) {
    // widths read first and heights read last: two layouts, however many rows
    const rows = ROWS.map((group) =>
      group.map(([id]) => {
        const el = this.el(id); // a caption is measured with its "Left" / "Right" tag
        const box = id.startsWith("pk-cap-") ? el.parentElement : el;
        return { id, box, slot: el, width: box.getBoundingClientRect().width };
      }),
    );
    // not laid out yet (a tab not shown): measured when the observer sees it shown
    this.rowsStale = rows.some((g) => g.some((r) => r.width === 0));
    if (this.rowsStale) return;
    this.fitted = key;
    const probes = [];
    ROWS.forEach((group, g) => {
      group.forEach(([id, slot], k) => {
        const r = rows[g][k];
        const probe = document.createElement("div");
        probe.style.cssText =
          "position:absolute;left:0;top:0;visibility:hidden;" +
          "pointer-events:none;display:flex;flex-direction:column;width:" +
          r.width +
          "px";
        const at = r.slot === r.box ? -1 : [...r.box.children].indexOf(r.slot);
        r.texts = this.rowTexts(id, slot);
        r.clones = r.texts.map(([h]) => {
          const c = r.box.cloneNode(true);
          c.removeAttribute("id");
          for (const e of c.querySelectorAll("[id]")) e.removeAttribute("id");
          c.style.minHeight = "";
          c.style.flex = "none"; // the chapter title's flex basis is a width, not a height
          (at < 0 ? c : c.children[at]).innerHTML = h;
          probe.appendChild(c);
          return c;
        });
        r.box.parentElement.appendChild(probe);
        probes.push(probe);
      });
    });
    const tall = rows.map((group) => {
      const hs = group.flatMap((r) =>
        r.clones.map((c, k) => [c.getBoundingClientRect().height, r.texts[k][1]]),
      );
      const most = Math.max(...hs.map(([h]) => h));
      if (!group[0].id.startsWith("pk-cap-")) return most;
      // the height that all but the rarest longest captions fit in (counted in frames)
      hs.sort((a, b) => b[0] - a[0]);
      let over = 0,
        common = hs[hs.length - 1][0];
      for (const [h, n] of hs) {
        over += n;
        if (over > CAPTION_RARE * group.length * this.frames.length) {
          common = h;
          break;
        }
      }
      return Math.min(most, Math.max(common, CAPTION_ROOM * window.innerHeight));
    });
    rows.forEach((group, g) => {
      for (const r of group) r.box.style.minHeight = `${Math.ceil(tall[g])}px`;
    });
    for (const p of probes) p.remove();
  },

  // The timeline's step numbers sit under their frames, and on a narrow screen steps a frame
  // or two apart ("1234" on a phone) would overlap. Measured once per width and payload, as
  // fitRows: left to right, a number that would touch the last one kept is left out. The
  // current step's number is always shown, underlined, and those it would touch make way
  // (markStep swaps classes only: a key costs no layout).
  fitSteps() {
    const spans = [...this.el("pk-tl-box").querySelectorAll(".pk-tl-steps span")];
    const boxes = spans.map((s) => s.getBoundingClientRect());
    if (!spans.length || boxes.every((b) => b.width === 0)) return; // hidden (presenter mode)
    const GAP = 3; // px between two numbers
    const touch = (a, b) => a.left < b.right + GAP && b.left < a.right + GAP;
    let kept = null;
    spans.forEach((s, k) => {
      const keep = !kept || !touch(boxes[k], kept);
      s.classList.toggle("pk-thin", !keep);
      if (keep) kept = boxes[k];
    });
    this.stepNear = new Map(
      spans.map((s, k) => [
        Number(s.dataset.chapter),
        spans.filter((_, j) => j !== k && touch(boxes[j], boxes[k])),
      ]),
    );
    this.markStep(this.markedStep);
  },

  markStep(step) {
    this.markedStep = step;
    const spans = this.el("pk-tl-box").querySelectorAll(".pk-tl-steps span");
    const near = this.stepNear?.get(step) || [];
    spans.forEach((s) => {
      s.classList.toggle("on", Number(s.dataset.chapter) === step);
      s.classList.toggle("pk-yield", near.includes(s));
    });
  },

  // In the page (not presenter mode) the player never gets shorter while one steps: a frame
  // with a shorter narration or shorter panels would shorten the page, and a reader scrolled
  // to its end would see the grids jump down as the browser pulls the scroll position back.
  // It keeps the tallest height it has had at this width, read from the observer's entry
  // (after layout: no layout of its own). Only grows here: a shrink made inside the observer
  // would be a resize loop, so letting go (new width, frames or mode) is releaseHeight's.
  holdHeight(seen) {
    if (this.present || !seen.borderBoxSize) return;
    if (seen.contentRect.width !== this.heldWidth) {
      this.heldWidth = seen.contentRect.width;
      requestAnimationFrame(() => this.releaseHeight(this.heldWidth));
      return;
    }
    const h = seen.borderBoxSize[0].blockSize;
    if (h > this.tallest + 0.5) {
      this.tallest = h;
      this.root.style.minHeight = `${h}px`;
    }
  },

  // Let go of the height held, and hold the one the frame on screen has by itself.
  releaseHeight(width) {
    this.heldWidth = width;
    this.tallest = 0;
    this.root.style.minHeight = "";
    if (this.present || !this.root.isConnected) return;
    this.tallest = this.root.getBoundingClientRect().height;
    this.root.style.minHeight = `${this.tallest}px`;
  },

  // In presenter mode the scoreboard has the screen's height under the caption, and takes it:
  // at 1280x720 it left the bottom third empty, so it grows (to 1.4 times, a little short of
  // the room); on a short screen (a zoomed browser: 1024x576 at 150 %) its text shrinks until it
  // fits, rather than running under the screen's edge. A few tries each: margins are in rem.
  fitScore() {
    const score = this.el("pk-score");
    score.style.fontSize = "";
    if (!this.present || score.hidden) return;
    const room = this.el("pk-main").clientHeight;
    const need = () => score.getBoundingClientRect().height;
    // growing stops short of the bottom corner where "F: leave presenter mode" shows
    const grow = room - 2.5 * parseFloat(getComputedStyle(this.el("pk-hint")).fontSize);
    let scale = 1;
    for (let k = 0; k < 3 && need() < 0.9 * grow && scale < 1.4; k++) {
      scale = Math.min(1.4, (scale * 0.95 * grow) / need());
      score.style.fontSize = `${scale.toFixed(3)}em`;
    }
    for (let k = 0; k < 4; k++) {
      const h = need(); // past the room: too little screen, or a grown line that wrapped
      if (h <= room + 0.5 || scale <= 0.5) break;
      scale = Math.max(0.5, (0.99 * scale * room) / h);
      score.style.fontSize = `${scale.toFixed(3)}em`;
    }
  },

  // Presenter mode's own fitting, redone on each frame (its grids and panels are new pieces)
  // [HTML, frames showing it] for each text a row's box shows over the lesson (a strip's bar
  // widths change no height), the longest texts first, at most FIT_MAX of them.
  rowTexts(id, slot) {
    let all; // [HTML, frames]
    if (id === "pk-chapter") all = this.data.chapters.map((c) => [esc(c.title), 1]);
    else if (slot === null) all = [[this.el(id).innerHTML, 1]];
    else {
      const n = new Map();
      const at = this.slot[slot];
      for (const rec of this.frames) n.set(rec[at], (n.get(rec[at]) || 0) + 1);
      all = [...n].map(([p, k]) => [this.pieces[p], k]);
    }
    const byText = new Map();
    for (const [h, k] of all) {
      const text = h.replace(/<[^>]*>/g, "");
      const seen = byText.get(text);
      if (seen) seen[1] += k;
      else byText.set(text, [h, k]);
    }
    return [...byText]
      .sort((a, b) => b[0].length - a[0].length)
      .slice(0, FIT_MAX)
      .map((x) => x[1]);
  },
};

if (typeof module === "object") module.exports = { RowFitting };
