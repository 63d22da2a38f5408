// The lesson player's browser half. It draws nothing: every piece of HTML and SVG was rendered
// by the server (paged/viz/player/payload.py) and arrives once, deflated. A key only swaps pieces, so stepping
// costs no server round trip. Keys are handled as they arrive (none is dropped); the URL is
// updated once per animation frame.
const SPEEDS = [1, 2, 4, 8, 15, 30];
// Every key the player acts on besides ? and Escape (see key()).
const PLAYER_KEYS = new Set(["ArrowRight", "ArrowLeft", "PageDown", "PageUp", "Home", "End", " ",
                             "Spacebar", "+", "=", "-", "−", "_", "f", "F", "t", "T",
                             "r", "R", "c", "C", "h", "H"]);
// Widgets that move their own selection with these keys (the scenario lab's table, a slider,
// tabs, a list): a key meant for them is theirs, not a step of the lesson.
const OWN_KEYS = "[role=grid], [role=treegrid], [role=slider], [role=tablist], [role=listbox], " +
                 "[role=combobox], [role=menu], [role=radiogroup], [role=spinbutton]";
const HINT_MS = 4000;  // how long presenter mode says how to leave it
const SLOTS = ["lm", "lg", "lp", "rm", "rg", "rp", "lc", "rc", "body", "step"];
// The rows above the grids whose text changes from frame to frame (see fitRows): [box id,
// slot index into a frame record] per side; a chapter title and a side title come from data.
const ROWS = [[["pk-chapter", null]], [["pk-cap-l", 6], ["pk-cap-r", 7]],
              [["pk-title-l", null], ["pk-title-r", null]], [["pk-lm", 0], ["pk-rm", 3]]];
const FIT_MAX = 40;  // texts measured per box: the longest (a long run has thousands)
// The captions' row is held for the tallest caption only up to this share of the screen's
// height; past it, for the 10 % of frames with the longest captions, one long caption (six
// requests stopping in one step) pushes the grids down on its own frame instead.
const CAPTION_ROOM = 0.15, CAPTION_RARE = 0.1;
// Presenter mode at a projector: no text with a line box under 17 px. An HTML line of 15 px
// type is 17.5 px; an SVG label's box is only about 1.07 em, so the grids' labels are grown to
// 16.5 px (fitGridText). Both sizes are player.css's (--pk-min, --pk-grid-min): it says from
// which screen size up.
const CELL_UNITS = 18, LABEL_ROOM = 30;  // a cell's width and the row labels' room (svg.py)
const FLASH_MS = 1200;  // how long presenter mode shows what Space or + / − did
const TARGETS = { lm: "pk-lm", lg: "pk-lg", lp: "pk-lp", rm: "pk-rm", rg: "pk-rg", rp: "pk-rp",
                  lc: "pk-cap-l", rc: "pk-cap-r", body: "pk-body" };

async function inflate(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return JSON.parse(await new Response(stream).text());
}

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;",
                                                 '"': "&quot;", "'": "&#39;" }[c]));
}

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

class Player {
  constructor(root, data) {
    this.root = root;
    this.el = (id) => root.querySelector("#" + id);
    this.data = data;
    this.i = -1;
    this.shown = {};
    this.speed = 2;
    this.playing = false;
    this.urlPending = false;
    this.urlTimes = [];
    this.times = [];          // keydown -> painted, ms (read by bench/frames.py)
    this.early = [];          // keys pressed before the first frames were in (see key())
    this.onKey = (e) => this.key(e);
    document.addEventListener("keydown", this.onKey, true);
    // A new width or font size (a resized window, presenter mode, zoom) re-measures the rows.
    this.fitted = "";
    // (after the observer's turn: rows grown inside it would be a resize loop error)
    this.resized = new ResizeObserver((seen) => {
      this.holdHeight(seen[seen.length - 1]);
      requestAnimationFrame(() => {
        this.fitRows();
        this.fitScore();
        this.fitSteps();
        this.fitPresent();
      });
    });
    this.tallest = 0;
    this.resized.observe(root);
    try { if (window.localStorage.getItem("pk-theme") === "hc") this.setTheme(true); }
    catch (_) { /* storage refused (a file:// page in some browsers): the plain theme */ }
    if (document.fonts) {
      document.fonts.ready.then(() => { this.fitted = ""; this.fitRows(); this.fitPresent(); });
    }
    pointInit(this);  // point.js: pointing, the clicker, the presenter console
  }

  // Open ``data`` on frame ``start``; ``start`` null stays on the frame shown (the same lesson
  // in another language, or more of a live run: ``follow`` keeps a run watched at its end at
  // the new end). The frame shown is read once the frames are unpacked, not when they were
  // asked for: until then the keys step the frames on screen, and those steps count.
  async load(data, start, follow) {
    this.loading = data;
    const same = start === null;
    this.failed = false;                  // frames are coming again: keys wait for them
    let body;
    try {
      body = await inflate(data.z);
    } catch (err) {
      if (this.loading === data) this.unpackFailed(data, err);
      return;
    }
    if (this.loading !== data) return;    // a newer payload arrived meanwhile
    if (start === null) {
      const atEnd = this.i >= this.frames.length - 1;
      start = follow && atEnd ? data.num_frames - 1 : this.i;
    }
    this.data = data;
    this.pieces = body.pieces;
    this.frames = body.frames;
    this.shown = {};
    this.shownChapter = undefined;     // another language: the chapter title is redrawn too
    this.static();
    this.i = -1;
    this.fitted = "";
    // other frames: their own tallest; the same trace with more frames (a live run's next
    // payload, every 0.75 s) or in another language keeps the height held, or the page
    // shrank under a reader scrolled to its end on every payload
    if (!same) this.releaseHeight(this.heldWidth);
    this.go(start);
    this.fitRows();
    this.fitSteps();
    this.fitPresent();  // the rows above the grids are held now: the grids' own size
    for (const k of this.early.splice(0)) this.act(k);
    this.el("pk-error").hidden = true;
    delete this.root.dataset.error;
    this.root.dataset.ready = "1";
  }

  // The frames could not be unpacked (a browser without DecompressionStream, a damaged
  // payload): one line says so in the payload's language, and the keys kept for those frames
  // are dropped. Frames already on screen (another language failed) stay, and keys step them;
  // with none, keys are left to the page.
  unpackFailed(data, err) {
    console.error("lesson player: the frames could not be unpacked:", err);
    this.loading = null;                  // the address keeps the language shown
    this.early.length = 0;
    this.failed = !this.frames;
    const line = this.el("pk-error");
    line.textContent = data.text.unpack_failed;
    line.hidden = false;
    this.root.dataset.error = "unpack";
  }

  static() {
    const d = this.data, t = d.text;
    this.el("pk-title-l").innerHTML = d.titles.left;
    this.el("pk-title-r").innerHTML = d.titles.right;
    this.el("pk-tag-l").textContent = t.left;
    this.el("pk-tag-r").textContent = t.right;
    this.el("pk-legend").innerHTML = d.legend;
    this.el("pk-score").innerHTML = d.scoreboard;
    this.el("pk-tl-cap").textContent = "";
    this.el("pk-tl-cap").innerHTML = d.timeline_caption;
    this.el("pk-tl-box").innerHTML = d.timeline;
    const nav = this.el("pk-p-nav");
    nav.innerHTML = "";
    // One button per lesson step; a step this run never reaches is greyed, and says so.
    d.steps.forEach((s) => {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = s.title;
      if (s.chapter === null) {
        b.disabled = true;
        b.className = "pk-absent";
        b.title = s.absent;
      } else {
        b.dataset.chapter = s.chapter;
        b.onclick = () => { this.stop(); this.go(d.chapters[s.chapter].start); };
      }
      nav.appendChild(b);
    });
    const help = [["← →", t.key_arrows], ["PageUp PageDown", t.key_pages],
                  ["Home End", t.key_home_end], ["Space", t.key_space], ["+ −", t.key_speed],
                  ["F", t.key_f], ["T", t.key_theme], ["?", t.key_help], ["", t.key_timeline]]
      .filter(([, v]) => v !== undefined);
    // A payload without the theme's words (the kernel lesson: its drawings are inked for white
    // paper) is shown plain; the reader's choice stays stored for the other lessons.
    if (t.key_theme === undefined && this.theme) {
      this.theme = false;
      this.root.classList.remove("pk-hc");
      this.root.dataset.theme = "";
    }
    this.el("pk-help").innerHTML = "<div><h3>" + esc(t.help_title) + "</h3><table>" +
      help.map(([k, v]) => "<tr><td>" + k.split(" ").filter(Boolean).map(
        (x) => "<kbd>" + esc(x) + "</kbd>").join(" ") + "</td><td>" + esc(v) + "</td></tr>"
      ).join("") + "</table><p class='pk-dim'>" + esc(t.help_close) + "</p></div>";
    this.el("pk-help").onclick = () => this.help(false);
    this.el("pk-help-btn").onclick = () => this.help();
    this.el("pk-play").onclick = () => this.toggle();
    this.scrubber();
    this.showSpeed();
    pointStatic(this);
  }

  chapterOf(i) {
    const cs = this.data.chapters;
    for (let n = cs.length - 1; n >= 0; n--) if (cs[n].start <= i) return n;
    return 0;
  }

  go(i) {
    if (!this.frames) return;
    const last = this.frames.length - 1;
    // Math.trunc, not i | 0: that wraps past 2**31 (frame=4294967301 opened frame 5)
    i = Math.max(0, Math.min(last, Math.trunc(i) || 0));
    if (i === this.i) return;
    this.i = i;
    const rec = this.frames[i];
    for (let s = 0; s < SLOTS.length; s++) {
      const slot = SLOTS[s], p = rec[s];
      if (this.shown[slot] === p) continue;
      this.shown[slot] = p;
      if (TARGETS[slot]) this.el(TARGETS[slot]).innerHTML = this.pieces[p];
    }
    const n = this.chapterOf(i), ch = this.data.chapters[n];
    if (this.shownChapter !== n) {
      this.shownChapter = n;
      this.el("pk-chapter").textContent = ch.title;
      this.el("pk-sides").hidden = ch.score;
      this.el("pk-score").hidden = !ch.score;
      this.root.dataset.score = ch.score ? "1" : "0";
      if (ch.score) this.fitScore();
      const step = ch.step === null ? this.lastStepBefore(n) : n;
      this.root.querySelectorAll(".pk-p-nav button").forEach((b) =>
        b.classList.toggle("on", Number(b.dataset.chapter) === step));
      this.markStep(step);
    }
    const ind = this.el("pk-frame");
    ind.innerHTML = esc(this.data.text.frame_of.replace("{i}", i).replace("{last}", last)) +
      "<small>" + esc(this.pieces[rec[9]]) + "</small>";
    ind.dataset.frame = i;
    const svg = this.el("pk-tl-box").querySelector("svg");
    if (svg) {
      const w = Number(svg.dataset.width), l = Number(svg.dataset.left), r = Number(svg.dataset.right);
      const x = l + (w - l - r) * (i + 0.5) / this.frames.length;
      svg.querySelector(".pk-tl-head").setAttribute("transform", "translate(" + x.toFixed(1) + ",0)");
    }
    this.root.dataset.frame = i;
    if (this.present) this.fitPresent();
    this.queueUrl();
    pointFrame(this);
  }

  // The chapter title, the captions, the side titles and the metrics strips sit above the
  // grids, and their text wraps to more lines on some frames than on others: each row is held
  // as tall as its tallest text at this width, on both sides, so the grids neither move nor
  // resize under the lecturer's pointer, and both sides keep one scale (the captions up to a
  // share of the screen: CAPTION_ROOM). Measured once per width, font size and payload (off
  // screen, all at once); a key costs nothing.
  fitRows() {
    if (!this.frames) return;
    const key = [this.root.clientWidth, getComputedStyle(this.root).fontSize, this.data.id,
                 this.data.lang, this.frames.length, window.innerHeight].join();
    if (key === this.fitted && !this.rowsStale) return;
    // On the scoreboard the sides are hidden: they are shown unseen while measured (no paint
    // in between), so stepping back to the grids finds its rows fitted and measures nothing
    // on that key (it cost the key 20-60 ms).
    const sides = this.el("pk-sides"), score = this.el("pk-score"), onScore = sides.hidden;
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
  }

  measureRows(key) {
    // widths read first and heights read last: two layouts, however many rows
    const rows = ROWS.map((group) => group.map(([id, slot]) => {
      const el = this.el(id);  // a caption is measured with its "Left" / "Right" tag
      const box = id.startsWith("pk-cap-") ? el.parentElement : el;
      return { id, box, slot: el, width: box.getBoundingClientRect().width };
    }));
    // not laid out yet (a tab not shown): measured when the observer sees it shown
    this.rowsStale = rows.some((g) => g.some((r) => r.width === 0));
    if (this.rowsStale) return;
    this.fitted = key;
    const probes = [];
    ROWS.forEach((group, g) => group.forEach(([id, slot], k) => {
      const r = rows[g][k];
      const probe = document.createElement("div");
      probe.style.cssText = "position:absolute;left:0;top:0;visibility:hidden;" +
        "pointer-events:none;display:flex;flex-direction:column;width:" + r.width + "px";
      const at = r.slot === r.box ? -1 : [...r.box.children].indexOf(r.slot);
      r.texts = this.rowTexts(id, slot);
      r.clones = r.texts.map(([h]) => {
        const c = r.box.cloneNode(true);
        c.removeAttribute("id");
        c.querySelectorAll("[id]").forEach((e) => e.removeAttribute("id"));
        c.style.minHeight = "";
        c.style.flex = "none";  // the chapter title's flex basis is a width, not a height
        (at < 0 ? c : c.children[at]).innerHTML = h;
        probe.appendChild(c);
        return c;
      });
      r.box.parentElement.appendChild(probe);
      probes.push(probe);
    }));
    const tall = rows.map((group) => {
      const hs = group.flatMap((r) => r.clones.map((c, k) =>
        [c.getBoundingClientRect().height, r.texts[k][1]]));
      const most = Math.max(...hs.map(([h]) => h));
      if (!group[0].id.startsWith("pk-cap-")) return most;
      // the height that all but the rarest longest captions fit in (counted in frames)
      hs.sort((a, b) => b[0] - a[0]);
      let over = 0, common = hs[hs.length - 1][0];
      for (const [h, n] of hs) {
        over += n;
        if (over > CAPTION_RARE * group.length * this.frames.length) { common = h; break; }
      }
      return Math.min(most, Math.max(common, CAPTION_ROOM * window.innerHeight));
    });
    rows.forEach((group, g) => group.forEach((r) => {
      r.box.style.minHeight = Math.ceil(tall[g]) + "px";
    }));
    probes.forEach((p) => p.remove());
  }

  // The timeline's step numbers sit under their frames, and on a narrow screen steps a frame
  // or two apart ("1234" on a phone) would overlap. Measured once per width and payload, as
  // fitRows: left to right, a number that would touch the last one kept is left out. The
  // current step's number is always shown, underlined, and those it would touch make way
  // (markStep swaps classes only: a key costs no layout).
  fitSteps() {
    const spans = [...this.el("pk-tl-box").querySelectorAll(".pk-tl-steps span")];
    const boxes = spans.map((s) => s.getBoundingClientRect());
    if (!spans.length || boxes.every((b) => b.width === 0)) return;  // hidden (presenter mode)
    const GAP = 3;  // px between two numbers
    const touch = (a, b) => a.left < b.right + GAP && b.left < a.right + GAP;
    let kept = null;
    spans.forEach((s, k) => {
      const keep = !kept || !touch(boxes[k], kept);
      s.classList.toggle("pk-thin", !keep);
      if (keep) kept = boxes[k];
    });
    this.stepNear = new Map(spans.map((s, k) =>
      [Number(s.dataset.chapter), spans.filter((_, j) => j !== k && touch(boxes[j], boxes[k]))]));
    this.markStep(this.markedStep);
  }

  markStep(step) {
    this.markedStep = step;
    const spans = this.el("pk-tl-box").querySelectorAll(".pk-tl-steps span");
    const near = (this.stepNear && this.stepNear.get(step)) || [];
    spans.forEach((s) => {
      s.classList.toggle("on", Number(s.dataset.chapter) === step);
      s.classList.toggle("pk-yield", near.includes(s));
    });
  }

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
      this.root.style.minHeight = h + "px";
    }
  }

  // Let go of the height held, and hold the one the frame on screen has by itself.
  releaseHeight(width) {
    this.heldWidth = width;
    this.tallest = 0;
    this.root.style.minHeight = "";
    if (this.present || !this.root.isConnected) return;
    this.tallest = this.root.getBoundingClientRect().height;
    this.root.style.minHeight = this.tallest + "px";
  }

  // In presenter mode the scoreboard has the screen's height under the caption and no more:
  // on a short screen (a zoomed browser: 1024x576 at 150 %) its text shrinks until it fits,
  // rather than running under the screen's edge (at most three tries: margins are in rem).
  fitScore() {
    const score = this.el("pk-score");
    score.style.fontSize = "";
    if (!this.present || score.hidden) return;
    const room = this.el("pk-main").clientHeight;
    let scale = 1;
    for (let k = 0; k < 3; k++) {
      const need = score.getBoundingClientRect().height;
      if (need <= room + 0.5 || scale <= 0.5) break;
      scale = Math.max(0.5, scale * room / need);
      score.style.fontSize = scale.toFixed(3) + "em";
    }
  }

  // Presenter mode's own fitting, redone on each frame (its grids and panels are new pieces)
  // and on each resize: the grids' labels grown to --pk-grid-min px, the panels condensed to fit.
  fitPresent() {
    this.fitGridText();
    this.fitPanels();
  }

  // The grids are SVG scaled to their box, so at a 1280x720 projector a 10-unit label is
  // 10-12 px. In presenter mode each label is grown to --pk-grid-min px: a request's name
  // starts at its cell and runs over its owner's room in the row (narrowed down to 3/4 at
  // most, else left out: the block table beside says the same), a ref count ends at its
  // cell's right edge, row numbers are thinned to one per label height and the grid's left
  // margin widened for them, and lines under the grid wrap at its width. A grid is fitted
  // once per frame and scale; one fitted at another scale, and every grid out of presenter
  // mode, is first put back as the server drew it.
  fitGridText() {
    const slots = { "pk-lg": 1, "pk-rg": 4 };
    const least = this.present ? parseFloat(
      getComputedStyle(this.root).getPropertyValue("--pk-grid-min")) || 0 : 0;
    const sides = [];
    for (const id of Object.keys(slots)) {
      const holder = this.el(id);
      const svg = holder.querySelector("svg.pk-arena");
      if (!svg) continue;
      const redraw = () => {
        holder.innerHTML = this.pieces[this.frames[this.i][slots[id]]];
        return holder.querySelector("svg.pk-arena");
      };
      if (!least) {
        if (svg.dataset.fit && this.frames && this.i >= 0) redraw();
        continue;
      }
      const box = svg.getBoundingClientRect();
      if (!box.width || !box.height) continue;
      const vb = (svg.dataset.vb || svg.getAttribute("viewBox")).split(" ").map(Number);
      sides.push({ svg, redraw, box, vb });
    }
    if (!sides.length) return;
    // Both sides are drawn at one scale (the server draws their grids alike, payload.py): the
    // same room is made on the left and below on both.
    const vb = sides[0].vb;
    const scale = (w, h) => Math.min(...sides.map((s) => Math.min(s.box.width / w,
                                                                  s.box.height / h)));
    let u = least / scale(vb[2], vb[3]);
    const wide = Math.max(0, ...sides.flatMap((s) => [...s.svg.querySelectorAll("text.pk-rl")]
      .map((t) => textWidth(t.textContent, u, false))));
    const extra = Math.max(0, wide - LABEL_ROOM + 2);  // room for the grown row numbers
    if (extra > 0) u = least / scale(vb[2] + extra, vb[3]);
    const key = u.toFixed(3);
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
        this.growLabels(s.svg, u, vb);
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
  }

  growLabels(svg, u, vb) {
    let last = -Infinity;
    for (const t of svg.querySelectorAll("text")) {
      const size = Math.max(Number(t.getAttribute("font-size")), u);
      t.setAttribute("font-size", size.toFixed(2));
      const w = textWidth(t.textContent, size, t.getAttribute("font-weight") === "700");
      if (t.classList.contains("pk-rl")) {  // one row number per label height
        // on its row's middle, the first one's top inside the grid's top margin
        const y = Math.max(Number(t.dataset.cy) + 0.36 * size, vb[1] + 0.95 * size);
        t.setAttribute("y", y.toFixed(2));
        t.style.display = y - last < 1.3 * size ? "none" : "";
        if (t.style.display === "") last = y;
      } else if (t.classList.contains("pk-nm") || t.classList.contains("pk-rc")) {
        const x0 = Number(t.dataset.x0);
        t.setAttribute("y", (Number(t.dataset.cy) + 0.36 * size).toFixed(2));
        t.removeAttribute("textLength");
        t.removeAttribute("lengthAdjust");
        // a row too short for the grown label's box (a half-height FP8 row, or a grid drawn
        // small) shows no names: they would run into the next row's
        let show = 1.1 * size <= Number(t.dataset.h) / 0.9;
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
  }

  // Under a grid: the CPU tier's title and the scale note, grown to ``size`` units, wrap at
  // the grid's width (they were narrowed to it), what follows them moves down, and the grid
  // is made taller for them.
  fitUnder(svg, size) {
    const vb = svg.getAttribute("viewBox").split(" ").map(Number);
    const width = vb[0] + vb[2] - 2, step = 1.25 * size;
    let shift = 0;
    const cpu = svg.querySelector("g.pk-cpu");
    if (cpu && cpu.firstElementChild) {
      const n = wrapText(cpu.firstElementChild, size, width, step);
      if (n > 1) {
        shift = (n - 1) * step;
        const g = document.createElementNS(svg.namespaceURI, "g");
        g.setAttribute("transform", "translate(0," + shift.toFixed(2) + ")");
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
  }

  // Presenter mode shows each side's block tables (or reservations) and queue beside its
  // grid. Where they do not fit the screen's height, the rows this frame left unchanged go
  // first (from the last, with the finished list), counted in one line; the rows the frame
  // changed, and the queue with its blocked requests' reasons, always stay.
  fitPanels() {
    for (const id of ["pk-lp", "pk-rp"]) {
      const box = this.el(id);
      const rest = box.querySelector(".pk-rest");
      box.querySelectorAll(".pk-cut").forEach((e) => e.classList.remove("pk-cut"));
      if (rest) rest.hidden = true;
      if (!this.present || !box.clientHeight) continue;
      const over = () => box.scrollHeight > box.clientHeight + 1;
      if (!over()) continue;
      const done = box.querySelector(".pk-done");
      if (done) done.classList.add("pk-cut");
      // the request pointed at keeps its rows: its arrows start from them (point.js)
      const focus = this.pt ? this.pt.focus : null;
      const rows = [...box.querySelectorAll(".pk-tables > .pk-row:not(.pk-hot)")]
        .filter((r) => r.dataset.req !== focus).reverse();
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
  }

  // Space and + / − change what presenter mode does not show (the play button and the speed
  // are hidden there): say for a moment what they did.
  flash() {
    const f = this.el("pk-flash");
    if (!f || !this.present) return;
    f.textContent = (this.playing ? "▶ " : "❚❚ ") + this.el("pk-speed").textContent;
    f.hidden = false;
    clearTimeout(this.flashTimer);
    this.flashTimer = setTimeout(() => { f.hidden = true; }, FLASH_MS);
  }

  // A projector theme: light on dark and at full contrast, for a washed-out projector.
  // Kept for the next lesson opened in this browser.
  setTheme(on) {
    this.theme = on;
    this.root.classList.toggle("pk-hc", on);
    this.root.dataset.theme = on ? "hc" : "";
    try { window.localStorage.setItem("pk-theme", on ? "hc" : ""); } catch (_) { /* none */ }
  }

  // [HTML, frames showing it] for each text a row's box shows over the lesson (a strip's bar
  // widths change no height), the longest texts first, at most FIT_MAX of them.
  rowTexts(id, slot) {
    let all;  // [HTML, frames]
    if (id === "pk-chapter") all = this.data.chapters.map((c) => [esc(c.title), 1]);
    else if (slot === null) all = [[this.el(id).innerHTML, 1]];
    else {
      const n = new Map();
      for (const rec of this.frames) n.set(rec[slot], (n.get(rec[slot]) || 0) + 1);
      all = [...n].map(([p, k]) => [this.pieces[p], k]);
    }
    const byText = new Map();
    for (const [h, k] of all) {
      const text = h.replace(/<[^>]*>/g, "");
      const seen = byText.get(text);
      if (seen) seen[1] += k;
      else byText.set(text, [h, k]);
    }
    return [...byText].sort((a, b) => b[0].length - a[0].length).slice(0, FIT_MAX)
      .map((x) => x[1]);
  }

  lastStepBefore(n) {
    for (let k = n; k >= 0; k--) if (this.data.chapters[k].step !== null) return k;
    return -1;
  }

  queueUrl() {
    if (this.urlPending) return;
    this.urlPending = true;
    requestAnimationFrame(() => {
      this.urlPending = false;
      if (this.i < 0) return;  // no frame shown yet (it said frame=-1): go() writes it
      // Chromium ignores more than ~200 history updates per 10 s: past 150, update at most
      // every 100 ms (the last frame always lands: a trailing update is scheduled).
      const now = performance.now();
      this.urlTimes = this.urlTimes.filter((t) => now - t < 10000);
      if (this.urlTimes.length > 150 && now - this.urlTimes[this.urlTimes.length - 1] < 100) {
        clearTimeout(this.urlTimer);
        this.urlTimer = setTimeout(() => this.queueUrl(), 100);
        return;
      }
      this.urlTimes.push(now);
      if (this.data.standalone) { this.hashUrl(); return; }
      const u = new URL(window.location.href);
      const lang = this.chosenLang();
      if (lang !== "en") u.searchParams.set("lang", lang);
      else u.searchParams.delete("lang");
      if (this.linkFrame === false) {
        // the page cannot reopen these frames from a link: the URL promises none of them
        for (const k of ["lesson", "frame", "present"]) u.searchParams.delete(k);
      } else {
        u.searchParams.set("lesson", this.data.lesson);
        u.searchParams.set("frame", String(this.i));
        if (this.present) u.searchParams.set("present", "1");
        else u.searchParams.delete("present");
      }
      if (u.href !== window.location.href) window.history.replaceState(window.history.state, "", u.href);
    });
  }

  // The language last chosen, whose frames may still be unpacking: the link says it already.
  chosenLang() { return (this.loading || this.data).lang; }

  // A standalone file (paged/viz/export/standalone.py) has no server to keep query params for: the
  // frame, language and presenter mode live in the hash, which a file:// link keeps. A hash
  // without lang opens in the file's first language (``home_lang``: zh for `--lang zh`), so
  // any other language is written out, English included.
  hashUrl() {
    let h = "#frame=" + this.i;
    const lang = this.chosenLang();
    if (lang !== (this.data.home_lang || "en")) h += "&lang=" + lang;
    if (this.present) h += "&present=1";
    h += pointHash(this);
    if (window.location.hash !== h) window.history.replaceState(window.history.state, "", h);
  }

  chapter(dir) {
    const cs = this.data.chapters, n = this.chapterOf(this.i);
    if (dir > 0) this.go(n + 1 < cs.length ? cs[n + 1].start : this.frames.length - 1);
    else this.go(this.i > cs[n].start ? cs[n].start : (n > 0 ? cs[n - 1].start : 0));
  }

  key(e) {
    if (!this.root.isConnected) return;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const tag = (e.target && e.target.tagName) || "";
    if (/^(INPUT|TEXTAREA|SELECT)$/.test(tag) || (e.target && e.target.isContentEditable)) return;
    if (e.target && e.target.closest && e.target.closest(OWN_KEYS)) return;
    const t0 = performance.now();
    const k = e.key;
    if (!this.frames) {
      // The first frames are still unpacking: a player key is kept and acted on once they
      // are in, so a key counts whenever it is pressed (none are coming once unpacking failed).
      if (!this.failed && (PLAYER_KEYS.has(k) || k === "?")) {
        this.early.push(k);
        e.preventDefault();
        e.stopPropagation();
      }
      return;
    }
    if (!this.act(k)) return;
    e.preventDefault();
    e.stopPropagation();
    requestAnimationFrame(() => {
      this.times.push(performance.now() - t0);
      if (this.times.length > 5000) this.times.shift();
    });
  }

  // Do what key ``k`` says; false when it says nothing to the player.
  act(k) {
    if (!this.el("pk-help").hidden && k !== "?" && k !== "Escape") {
      // over the help, a player key only closes it: a step taken behind it would go unseen
      if (!PLAYER_KEYS.has(k)) return false;
      this.help(false);
      return true;
    }
    if (pointAct(this, k)) return true;
    if (k === "ArrowRight") { this.stop(); this.go(this.i + 1); }
    else if (k === "ArrowLeft") { this.stop(); this.go(this.i - 1); }
    else if (k === "PageDown") { this.stop(); this.chapter(1); }
    else if (k === "PageUp") { this.stop(); this.chapter(-1); }
    else if (k === "Home") { this.stop(); this.go(0); }
    else if (k === "End") { this.stop(); this.go(this.frames.length - 1); }
    else if (k === " " || k === "Spacebar") { this.toggle(); this.flash(); }
    else if (k === "+" || k === "=") { this.setSpeed(1); this.flash(); }
    else if (k === "-" || k === "−" || k === "_") { this.setSpeed(-1); this.flash(); }
    else if ((k === "t" || k === "T") && this.data.text.key_theme !== undefined) {
      this.setTheme(!this.theme);
    }
    else if (k === "f" || k === "F") this.setPresent(!this.present);
    else if (k === "?") this.help();
    else if (k === "Escape" && !this.el("pk-help").hidden) this.help(false);
    else if (k === "Escape" && this.present) this.setPresent(false);
    else return false;
    return true;
  }

  help(show) {
    const h = this.el("pk-help");
    h.hidden = show === undefined ? !h.hidden : !show;
    this.root.dataset.help = h.hidden ? "0" : "1";
  }

  setPresent(on) {
    this.present = on;
    this.root.classList.toggle("pk-present", on);
    document.body.classList.toggle("pk-presenting", on);
    this.root.dataset.present = on ? "1" : "0";
    this.releaseHeight(undefined);
    if (this.frames) this.fitScore();
    if (this.frames) this.fitPresent();
    // Presenter mode hides the help button: say once, for a few seconds, how to leave it (a
    // student opening a ?present=1 link would otherwise have to know F or Escape).
    const hint = this.el("pk-hint");
    clearTimeout(this.hintTimer);
    hint.textContent = (this.data && this.data.text && this.data.text.present_hint) || "";
    // (never in a still: an export photographs frames, and a hint there would depend on
    // how long the capture took)
    hint.hidden = !on || !hint.textContent || this.still;
    if (!hint.hidden) this.hintTimer = setTimeout(() => { hint.hidden = true; }, HINT_MS);
    this.queueUrl();
  }

  setSpeed(d) {
    this.speed = Math.max(0, Math.min(SPEEDS.length - 1, this.speed + d));
    this.showSpeed();
  }

  showSpeed() {
    const fps = SPEEDS[this.speed];
    const s = this.el("pk-speed");
    s.textContent = this.data.text.speed.replace("{fps}", fps);
    s.dataset.fps = fps;
    const b = this.el("pk-play");
    b.textContent = (this.playing ? "❚❚ " + this.data.text.pause : "▶ " + this.data.text.play);
    this.root.dataset.playing = this.playing ? "1" : "0";
  }

  toggle() { if (this.playing) this.stop(); else this.play(); }

  play() {
    if (this.i >= this.frames.length - 1) this.go(0);
    this.playing = true;
    this.showSpeed();
    let acc = 0, prev = performance.now();
    const tick = (now) => {
      if (!this.playing) return;
      acc += now - prev;
      prev = now;
      const every = 1000 / SPEEDS[this.speed];
      while (acc >= every) {
        acc -= every;
        if (this.i >= this.frames.length - 1) { this.stop(); return; }
        this.go(this.i + 1);
      }
      this.raf = requestAnimationFrame(tick);
    };
    this.raf = requestAnimationFrame(tick);
  }

  stop() {
    if (!this.playing) return;
    this.playing = false;
    cancelAnimationFrame(this.raf);
    this.showSpeed();
  }

  scrubber() {
    const box = this.el("pk-tl-box");
    const at = (e) => {
      const svg = box.querySelector("svg");
      const r = svg.getBoundingClientRect();
      const w = Number(svg.dataset.width), l = Number(svg.dataset.left), rr = Number(svg.dataset.right);
      const x0 = r.left + r.width * l / w, x1 = r.right - r.width * rr / w;
      const f = (e.clientX - x0) / Math.max(1, x1 - x0);
      return Math.floor(f * this.frames.length);
    };
    box.onpointerdown = (e) => {
      this.stop();
      box.setPointerCapture(e.pointerId);
      this.scrubbing = true;
      this.go(at(e));
      e.preventDefault();
    };
    box.onpointermove = (e) => { if (this.scrubbing) this.go(at(e)); };
    box.onpointerup = box.onpointercancel = (e) => {
      this.scrubbing = false;
      try { box.releasePointerCapture(e.pointerId); } catch (_) { /* already released */ }
    };
  }

  destroy() {
    pointDestroy(this);
    this.stop();
    this.resized.disconnect();
    document.removeEventListener("keydown", this.onKey, true);
    document.body.classList.remove("pk-presenting");
  }
}

// Chromium asks for the favicon again whenever the URL changes, so with the app's own icon
// (a server URL) every step would cost the server a request. The same icon as a data: URL
// costs nothing; a watcher puts it back if the app resets the icon on a later run.
function keepIcon(href) {
  const set = () => {
    document.querySelectorAll("link[rel~='icon']").forEach((l) => {
      if (l.getAttribute("href") !== href) l.setAttribute("href", href);
    });
  };
  set();
  if (!window.__pkIconWatch) {
    window.__pkIconWatch = new MutationObserver(set);
    window.__pkIconWatch.observe(document.head, { subtree: true, childList: true,
                                                  attributes: true, attributeFilter: ["href"] });
  }
}

export default function mountPlayer(component) {
  const { data, parentElement } = component;
  const root = parentElement.querySelector(".pk-player");
  if (!root || !data) return;
  if (data.icon) keepIcon(data.icon);
  let p = root.__pkPlayer;
  if (!p) {
    p = root.__pkPlayer = new Player(root, data);
    window.pkPlayer = p;
  }
  // Frames photographed for an export (paged/viz/export/animate.py): nothing transient is shown.
  p.still = !!data.still;
  root.dataset.still = p.still ? "1" : "0";
  // Read on every mount: the scenario lab's frames stop being linkable once its table has
  // changed (or were never: a run on the real model), without new frames.
  const link = data.link_frame !== false;
  if (p.linkFrame !== link) {
    p.linkFrame = link;
    if (p.frames) p.queueUrl();
  }
  if (p.loadedId !== data.id) {
    // The same trace in another language (or more live frames): stay on the frame shown.
    // Not the same lesson: every recording in the scenario lab is lesson "lab", and a new one
    // kept the last recording's frame number.
    const keep = p.loadedContent === data.content && p.i >= 0;
    p.loadedId = data.id;
    p.loadedContent = data.content;
    root.dataset.lang = data.lang;
    p.load(data, keep ? null : data.start, !!data.follow);
    if (p.present === undefined) p.setPresent(!!data.present);
  }
  return () => {
    if (!root.isConnected) p.destroy();
  };
}
