// The lesson player's browser half. It draws nothing: every piece of HTML and SVG was rendered
// by the server (paged/viz/player/payload.py) and arrives once, deflated. A key only swaps
// pieces, so stepping costs no server round trip. This file is the Player's core: loading a
// payload, showing a frame, presenter mode, mounting. Its other jobs sit beside it, one file
// each: where a key lands (stepping.js, pure functions); what a payload sets once (page.js),
// what a key does (keys.js), drawing (fit_rows.js, fit_present.js), the address (link.js) and
// autoplay with the scrubber (playing.js), mixed into the Player below; and pointing, the
// presenter console and the reading page, which point.js hooks in.

const HINT_MS = 4000; // how long presenter mode says how to leave it
// Where each slot of a frame record goes on the page; ``step`` is the frame indicator's.
// Which slot is where in a record is the payload's to say (its ``slots``).
const TARGETS = {
  lm: "pk-lm",
  lg: "pk-lg",
  lp: "pk-lp",
  rm: "pk-rm",
  rg: "pk-rg",
  rp: "pk-rp",
  lc: "pk-cap-l",
  rc: "pk-cap-r",
  body: "pk-body",
};
const NEEDED_SLOTS = [...Object.keys(TARGETS), "step"];

async function inflate(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return JSON.parse(await new Response(stream).text());
}

function esc(s) {
  return String(s).replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c],
  );
}

class Player {
  constructor(root, data) {
    this.root = root;
    this.el = (id) => root.querySelector(`#${id}`);
    this.data = data;
    this.i = -1;
    this.shown = {};
    this.speed = 2;
    this.playing = false;
    this.urlPending = false;
    this.urlTimes = [];
    this.times = []; // keydown -> painted, ms (read by bench/frames.py)
    this.early = []; // keys pressed before the first frames were in (see key())
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
    try {
      if (window.localStorage.getItem("pk-theme") === "hc") this.setTheme(true);
    } catch (_) {
      /* storage refused (a file:// page in some browsers): the plain theme */
    }
    if (document.fonts) {
      document.fonts.ready.then(() => {
        this.fitted = "";
        this.fitRows();
        this.fitPresent();
      });
    }
    pointInit(this); // point.js: pointing, the clicker, the presenter console
    askInit(this); // asking.js: exercise mode
  }

  // Open ``data`` on frame ``start``; ``start`` null stays on the frame shown (the same lesson
  // in another language, or more of a live run: ``follow`` keeps a run watched at its end at
  // the new end). The frame shown is read once the frames are unpacked, not when they were
  // asked for: until then the keys step the frames on screen, and those steps count.
  async load(data, start, follow) {
    this.loading = data;
    const same = start === null;
    this.failed = false; // frames are coming again: keys wait for them
    let body;
    let slot;
    try {
      slot = slotIndex(data.slots, NEEDED_SLOTS);
      body = await inflate(data.z);
    } catch (err) {
      if (this.loading === data) this.unpackFailed(data, err);
      return;
    }
    if (this.loading !== data) return; // a newer payload arrived meanwhile
    if (start === null) {
      const atEnd = this.i >= this.frames.length - 1;
      start = follow && atEnd ? data.num_frames - 1 : this.i;
    }
    this.data = data;
    this.slot = slot;
    this.pieces = body.pieces;
    this.frames = body.frames;
    this.shown = {};
    this.shownChapter = undefined; // another language: the chapter title is redrawn too
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
    this.fitPresent(); // the rows above the grids are held now: the grids' own size
    for (const k of this.early.splice(0)) this.act(k);
    this.el("pk-error").hidden = true;
    delete this.root.dataset.error;
    this.root.dataset.ready = "1";
  }

  // The frames could not be unpacked (a browser without DecompressionStream, a damaged
  // payload, one that names no slot the page fills): one line says so in the payload's language, and the keys kept for those frames
  // are dropped. Frames already on screen (another language failed) stay, and keys step them;
  // with none, keys are left to the page.
  unpackFailed(data, err) {
    console.error("lesson player: the frames could not be unpacked:", err);
    this.loading = null; // the address keeps the language shown
    this.early.length = 0;
    this.failed = !this.frames;
    const line = this.el("pk-error");
    line.textContent = data.text.unpack_failed;
    line.hidden = false;
    this.root.dataset.error = "unpack";
  }

  go(i) {
    if (!this.frames) return;
    const last = this.frames.length - 1;
    i = clampFrame(i, this.frames.length);
    if (i === this.i) return;
    this.i = i;
    const rec = this.frames[i];
    for (const slot of NEEDED_SLOTS) {
      const p = rec[this.slot[slot]];
      if (this.shown[slot] === p) continue;
      this.shown[slot] = p;
      if (TARGETS[slot]) this.el(TARGETS[slot]).innerHTML = this.pieces[p];
    }
    const n = chapterOf(this.data.chapters, i),
      ch = this.data.chapters[n];
    if (this.shownChapter !== n) {
      this.shownChapter = n;
      this.el("pk-chapter").textContent = ch.title;
      this.el("pk-sides").hidden = ch.score;
      this.el("pk-score").hidden = !ch.score;
      this.root.dataset.score = ch.score ? "1" : "0";
      if (ch.score) this.fitScore();
      const step = ch.step === null ? lastStepBefore(this.data.chapters, n) : n;
      for (const b of this.root.querySelectorAll(".pk-p-nav button")) {
        b.classList.toggle("on", Number(b.dataset.chapter) === step);
      }
      this.markStep(step);
    }
    const ind = this.el("pk-frame");
    ind.innerHTML =
      esc(this.data.text.frame_of.replace("{i}", i).replace("{last}", last)) +
      "<small>" +
      esc(this.pieces[rec[this.slot.step]]) +
      "</small>";
    ind.dataset.frame = i;
    const svg = this.el("pk-tl-box").querySelector("svg");
    if (svg) {
      const w = Number(svg.dataset.width),
        l = Number(svg.dataset.left),
        r = Number(svg.dataset.right);
      const x = l + ((w - l - r) * (i + 0.5)) / this.frames.length;
      svg.querySelector(".pk-tl-head").setAttribute("transform", `translate(${x.toFixed(1)},0)`);
    }
    this.root.dataset.frame = i;
    this.fitPresent(); // the grids' labels grow in either mode; the panels condense in one
    this.queueUrl();
    pointFrame(this);
    askFrame(this);
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
    hint.textContent = this.data?.text?.present_hint || "";
    // (never in a still: an export photographs frames, and a hint there would depend on
    // how long the capture took)
    hint.hidden = !on || !hint.textContent || this.still;
    if (!hint.hidden)
      this.hintTimer = setTimeout(() => {
        hint.hidden = true;
      }, HINT_MS);
    this.queueUrl();
  }

  destroy() {
    pointDestroy(this);
    askDestroy(this);
    this.stop();
    this.resized.disconnect();
    document.removeEventListener("keydown", this.onKey, true);
    document.body.classList.remove("pk-presenting");
  }
}

Object.assign(Player.prototype, Static, Keys, RowFitting, PresentFitting, Linking, Playing);

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
    window.__pkIconWatch.observe(document.head, {
      subtree: true,
      childList: true,
      attributes: true,
      attributeFilter: ["href"],
    });
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
