// The lesson player's browser half. It draws nothing: every piece of HTML and SVG was rendered
// by the server (viz/player/payload.py) and arrives once, deflated. A key only swaps pieces, so stepping
// costs no server round trip. Keys are handled as they arrive (none is dropped); the URL is
// updated once per animation frame.
const SPEEDS = [1, 2, 4, 8, 15, 30];
// Every key the player acts on besides ? and Escape (see key()).
const PLAYER_KEYS = new Set(["ArrowRight", "ArrowLeft", "PageDown", "PageUp", "Home", "End", " ",
                             "Spacebar", "+", "=", "-", "−", "_", "f", "F",
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
      });
    });
    this.tallest = 0;
    this.resized.observe(root);
    if (document.fonts) document.fonts.ready.then(() => { this.fitted = ""; this.fitRows(); });
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
                  ["F", t.key_f], ["?", t.key_help], ["", t.key_timeline]];
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

  // A standalone file (viz/export/standalone.py) has no server to keep query params for: the
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
    else if (k === " " || k === "Spacebar") this.toggle();
    else if (k === "+" || k === "=") this.setSpeed(1);
    else if (k === "-" || k === "−" || k === "_") this.setSpeed(-1);
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
  // Frames photographed for an export (viz/export/animate.py): nothing transient is shown.
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
