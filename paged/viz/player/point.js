// Pointing at things, the clicker, the presenter console and the "how to read this screen"
// page: player.js's companion, put in the same module before it (paged/viz/player/payload.py,
// script()). Like player.js it draws nothing of the lesson. The grids say whose each cell is
// and where each held block lies, and carry the frame's callouts (paged/viz/render/svg.py, point.py);
// the panels say whose each row is and which block each table entry names (html.py). This file
// lights a request up wherever it appears, sets each callout's sentence beside its outline,
// and draws the arrows from a table entry to its block: where those lie on screen only the
// browser knows.

const PT_SEEN = "pk-read-seen";    // localStorage: the reading page was shown once
const PT_CHANNEL = "pk-player";    // BroadcastChannel between a lesson window and its console
const PT_BLOCK = /^[0-9]{1,9}$/;   // a block number, as the server writes it
const PT_GAP = 6;                  // px between a callout's outline and its sentence

// ?console=1 (the app) or #console=1 (the one-file export): this window is a presenter console.
// ?still=1 / #still=1: a photographer (paged/viz/export/animate.py): nothing transient on screen.
function ptParams() {
  const q = new URLSearchParams(window.location.search);
  const h = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  const on = (k) => q.get(k) === "1" || h.get(k) === "1";
  return { console: on("console"), still: on("still") };
}

function pointInit(p) {
  const params = ptParams();
  const pt = p.pt = { focus: null, kbd: false, remote: false, heard: false, followed: false,
                      console: params.console, still: params.still, win: null, read: null };
  const main = p.el("pk-main");
  const layer = document.createElement("div");
  layer.className = "pk-pt-layer";
  layer.setAttribute("aria-hidden", "true");
  layer.innerHTML = "<svg class='pk-pt-arrows'><defs><marker id='pk-pt-head' viewBox='0 0 10 10'" +
    " refX='9' refY='5' markerWidth='6' markerHeight='6' orient='auto-start-reverse'>" +
    "<path d='M0,0L10,5L0,10z'/></marker></defs><g></g></svg><div></div>";
  main.appendChild(layer);
  pt.layer = layer;
  pt.arrows = layer.querySelector("g");
  pt.notes = layer.lastChild;
  const read = document.createElement("div");
  read.className = "pk-read";
  read.hidden = true;
  read.setAttribute("role", "dialog");
  p.root.appendChild(read);
  pt.read = read;
  // A request is pointed at by hovering any of its cells, rows or chips, or tabbing to a chip.
  pt.onOver = (e) => {
    const r = ptReqOf(p, e.target);
    if (r !== null) ptFocus(p, r, false);
    else if (!pt.kbd && pt.focus !== null) ptFocus(p, null, false);
  };
  pt.onLeave = () => { if (!pt.kbd) ptFocus(p, null, false); };
  pt.onIn = (e) => {
    const r = ptReqOf(p, e.target);
    if (r !== null) ptFocus(p, r, true);
  };
  pt.onOut = (e) => {
    const gone = e.target;
    // a frame swap removes the chip that had the focus: the request stays pointed at, and
    // the next frame's chip for it takes the focus (ptFrame)
    queueMicrotask(() => {
      if (!gone.isConnected || !pt.kbd) return;
      const now = document.activeElement;
      if (!now || ptReqOf(p, now) === null) ptFocus(p, null, false);
    });
  };
  p.root.addEventListener("mouseover", pt.onOver);
  p.root.addEventListener("mouseleave", pt.onLeave);
  p.root.addEventListener("focusin", pt.onIn);
  p.root.addEventListener("focusout", pt.onOut);
  pt.onDown = () => { if (!pt.read.hidden) ptRead(p, false); };
  document.addEventListener("pointerdown", pt.onDown, true);
  // the arrows and sentences follow the boxes they join (a resize, presenter mode, fonts)
  pt.resized = new ResizeObserver(() => requestAnimationFrame(() => {
    ptPlace(p);
    ptReadNumbers(p);
  }));
  pt.resized.observe(main);
  ptLink(p);
}

// The request a page element stands for (cells, rows, chips), or null.
function ptReqOf(p, el) {
  const hit = el && el.closest ? el.closest("[data-req]") : null;
  return hit && p.root.contains(hit) ? hit.dataset.req : null;
}

// Called by Player.static(): the payload's words, the keys' help, the console, the reading page.
function pointStatic(p) {
  const pt = p.pt, d = p.data, w = d.point || {};
  pt.read.innerHTML = d.reading || "";
  const table = p.el("pk-help").querySelector("table");
  if (table && w.key_focus) {
    const rows = [[["R"], w.key_focus], [["C"], w.key_console], [["H"], w.key_read]];
    for (const [keys, text] of rows) {
      const tr = document.createElement("tr");
      const k = document.createElement("td"), v = document.createElement("td");
      for (const key of keys) {
        const kbd = document.createElement("kbd");
        kbd.textContent = key;
        k.appendChild(kbd);
      }
      v.textContent = text;
      tr.append(k, v);
      table.appendChild(tr);
    }
  }
  if (pt.console) ptConsole(p);
  // The first visit shows how to read the screen, once. Not in a console, not for a
  // photographer, not in a browser driven by automation (navigator.webdriver: an export, a
  // test, a crawler), which is nobody's first visit.
  if (!pt.offered && !pt.console && !pt.still && !navigator.webdriver) {
    pt.offered = true;
    if (!ptSeen()) ptRead(p, true);
  }
}

function ptSeen() {
  try { return window.localStorage.getItem(PT_SEEN) === "1"; } catch (_) { return true; }
}

// Called by Player.go() on every frame shown.
function pointFrame(p) {
  const pt = p.pt;
  if (!pt) return;
  if (pt.focus !== null) ptMark(p);
  ptPlace(p);
  if (pt.console) ptConsoleFrame(p);
  if (!pt.remote) ptSend(p);
}

// A key for this file; true when it was one. Called by Player.act() before its own keys.
function pointAct(p, k) {
  const pt = p.pt;
  if (!pt.read.hidden) {
    // any key closes the reading page; H and Escape only close it, the rest also act
    ptRead(p, false);
    if (k === "h" || k === "H" || k === "Escape") return true;
  }
  if (k === "PageDown" || k === "PageUp") { p.stop(); ptClick(p, k === "PageDown" ? 1 : -1); }
  else if (k === "r" || k === "R") ptNextRequest(p, k === "r" ? 1 : -1);
  else if (k === "c" || k === "C") ptOpenConsole(p);
  else if (k === "h" || k === "H") ptRead(p, true);
  else if (k === "Escape" && pt.focus !== null) ptFocus(p, null, false);
  else return false;
  return true;
}

// What this file keeps in a one-file export's hash (player.js hashUrl): a console stays one
// when reloaded, a still page still.
function pointHash(p) {
  const pt = p.pt;
  return (pt && pt.console ? "&console=1" : "") + (pt && pt.still ? "&still=1" : "");
}

function pointDestroy(p) {
  const pt = p.pt;
  if (!pt) return;
  pt.resized.disconnect();
  document.removeEventListener("pointerdown", pt.onDown, true);
  window.removeEventListener("message", pt.onMessage);
  if (pt.channel) pt.channel.close();
  clearInterval(pt.clock);
}

// --- the clicker: lesson steps only ------------------------------------------------------------

// PageDown / PageUp: the next or previous keyframe (a lesson step), never a chapter between
// them. A run that reaches none of its steps (a lab recording) steps by chapter instead.
function ptClick(p, dir) {
  const kfs = (p.data.keyframes || []).map((k) => k.frame);
  if (!kfs.length) { p.chapter(dir); return; }
  const to = dir > 0 ? kfs.find((k) => k > p.i) : [...kfs].reverse().find((k) => k < p.i);
  if (to !== undefined) p.go(to);
}

// --- pointing at a request ---------------------------------------------------------------------

function ptFocus(p, req, kbd) {
  const pt = p.pt;
  if (pt.still) return;  // pointing is for a person: never in a photographed frame
  pt.kbd = req !== null && kbd;
  if (pt.focus === req) return;
  pt.focus = req;
  ptMark(p);
  if (p.present) p.fitPanels();  // a condensed panel gives the request's rows back
  ptArrows(p);
}

// Light up every cell, row, chip and block of the request in focus; dim the rest.
function ptMark(p) {
  const pt = p.pt, req = pt.focus;
  p.root.dataset.focus = req === null ? "" : "1";
  p.root.querySelectorAll(".pk-on").forEach((e) => e.classList.remove("pk-on"));
  if (req === null) return;
  for (const e of p.root.querySelectorAll("[data-req]")) {
    if (e.dataset.req === req) e.classList.add("pk-on");
  }
  // keyboard focus moves with the frames: the new frame's chip for the request takes it
  if (pt.kbd && !p.root.contains(document.activeElement)) {
    const chip = [...p.root.querySelectorAll("[data-req][tabindex]")]
      .find((e) => e.dataset.req === req);
    if (chip) chip.focus({ preventScroll: true });
  }
}

// R / shift+R: the next / previous request holding memory or queued on this frame, then none.
function ptNextRequest(p, dir) {
  const seen = [];
  for (const e of p.root.querySelectorAll("#pk-lp [data-req], #pk-rp [data-req], " +
                                          "#pk-lg [data-req], #pk-rg [data-req]")) {
    if (!seen.includes(e.dataset.req)) seen.push(e.dataset.req);
  }
  if (!seen.length) return;
  const at = seen.indexOf(p.pt.focus);
  const n = at < 0 ? (dir > 0 ? 0 : seen.length - 1) : at + dir;
  // a key's choice holds until the mouse points at another request
  ptFocus(p, n >= 0 && n < seen.length ? seen[n] : null, true);
}

// Everything placed on screen by position: arrows and callout sentences.
function ptPlace(p) {
  ptArrows(p);
  ptCallouts(p);
}

function ptBox(el, origin) {
  const r = el.getBoundingClientRect();
  return { l: r.left - origin.left, t: r.top - origin.top, r: r.right - origin.left,
           b: r.bottom - origin.top, w: r.width, h: r.height };
}

// One arrow per logical block of the request in focus, from its table entry to the physical
// block on the grid, and one from every other table entry naming one of those blocks (a
// shared prefix, parallel samples: three tables, one block, three arrows in). An entry the
// table folds into "…" starts its arrow at the "…". Paging only: a contiguous run has no
// table, and its cells light up instead. None while photographed.
function ptArrows(p) {
  const pt = p.pt;
  pt.arrows.replaceChildren();
  p.root.querySelectorAll("rect.pk-blk-on").forEach((e) => e.classList.remove("pk-blk-on"));
  if (pt.focus === null || pt.still) return;
  const origin = pt.layer.getBoundingClientRect();
  for (const side of ["l", "r"]) {
    const panel = p.el("pk-" + side + "p"), grid = p.el("pk-" + side + "g");
    const entries = [];
    for (const e of panel.querySelectorAll(".pk-row[data-req] [data-block], " +
                                           ".pk-row[data-req] [data-blocks]")) {
      const own = e.closest("[data-req]").dataset.req;
      const raw = e.dataset.block !== undefined ? [e.dataset.block] : e.dataset.blocks.split(" ");
      entries.push([e, own, raw.filter((b) => PT_BLOCK.test(b))]);
    }
    const mine = new Set(entries.filter(([, own]) => own === pt.focus).flatMap(([, , bs]) => bs));
    for (const [e, own, blocks] of entries) {
      for (const b of blocks) {
        if (!mine.has(b)) continue;
        const target = grid.querySelector("rect[data-block='" + b + "']");
        if (!target) continue;
        target.classList.add("pk-blk-on");
        const from = ptBox(e, origin), to = ptBox(target, origin);
        if (!from.w || !to.w) continue;  // not on screen (a panel presenter mode leaves out)
        ptArrow(pt, from, to, own, b, own === pt.focus);
      }
    }
  }
}

function ptArrow(pt, from, to, req, block, own) {
  // from the entry's side facing the block to the block's nearest vertical edge
  const right = from.l >= to.r;
  const sx = right ? from.l : from.r, sy = (from.t + from.b) / 2;
  const ex = right ? to.r : to.l, ey = (to.t + to.b) / 2;
  const bend = Math.max(30, Math.abs(sx - ex) / 3) * (right ? -1 : 1);
  const path = document.createElementNS(pt.arrows.namespaceURI, "path");  // the SVG one
  path.setAttribute("d", `M${sx.toFixed(1)},${sy.toFixed(1)}C${(sx + bend).toFixed(1)},` +
    `${sy.toFixed(1)} ${(ex - bend).toFixed(1)},${ey.toFixed(1)} ${ex.toFixed(1)},${ey.toFixed(1)}`);
  path.setAttribute("class", "pk-pt-arrow" + (own ? "" : " pk-pt-shared"));
  path.setAttribute("marker-end", "url(#pk-pt-head)");
  path.dataset.req = req;
  path.dataset.block = block;
  pt.arrows.appendChild(path);
}

// Each callout's sentence (the server's, in data-say) beside its dashed outline, above it
// when there is room in the grid's box, else under it; sentences never overlap.
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
    const room = ptBox(gridEl, origin);
    const note = document.createElement("div");
    note.className = "pk-pt-note";
    note.dataset.kind = g.dataset.kind || "";
    note.textContent = g.dataset.say || "";
    pt.notes.appendChild(note);
    const w = note.offsetWidth, h = note.offsetHeight;
    let left = Math.max(room.l, Math.min(at.l, room.r - w));
    let top = at.t - h - PT_GAP >= room.t ? at.t - h - PT_GAP : at.b + PT_GAP;
    for (const q of placed) {  // under any sentence already there
      if (left < q.r && q.l < left + w && top < q.b && q.t < top + h) top = q.b + 2;
    }
    note.style.left = left.toFixed(1) + "px";
    note.style.top = top.toFixed(1) + "px";
    placed.push({ l: left, t: top, r: left + w, b: top + h });
  }
}

// --- how to read this screen -------------------------------------------------------------------

// The reading page, with each panel's number set on the panel itself (panels not on screen,
// as presenter mode leaves some out, get none). Any key or click closes it.
function ptRead(p, show) {
  const pt = p.pt, read = pt.read;
  read.hidden = !show;
  p.root.dataset.read = show ? "1" : "0";
  read.querySelectorAll(".pk-read-num").forEach((e) => e.remove());
  if (!show) return;
  try { window.localStorage.setItem(PT_SEEN, "1"); } catch (_) { /* private mode: ask again */ }
  ptReadNumbers(p);
  // shown with the first frame, the rows above the grids are still being fitted: again once
  // they are (and the resize observer places them again on any later change)
  requestAnimationFrame(() => requestAnimationFrame(() => ptReadNumbers(p)));
}

function ptReadNumbers(p) {
  const read = p.pt.read;
  read.querySelectorAll(".pk-read-num").forEach((e) => e.remove());
  if (read.hidden) return;
  const placed = [];
  const origin = read.getBoundingClientRect();
  const card = read.firstElementChild ? read.firstElementChild.getBoundingClientRect() : null;
  const under = (x, y) => card && x >= card.left - 4 && x <= card.right + 4 &&
    y >= card.top - 4 && y <= card.bottom + 4;
  for (const li of read.querySelectorAll("li[data-panel]")) {
    const box = p.el(li.dataset.panel);
    const r = box && box.getBoundingClientRect();
    const shown = r && r.width && r.height && r.bottom > 0 && r.top < window.innerHeight;
    li.classList.toggle("pk-off", !shown);
    if (!shown) continue;
    const num = document.createElement("span");
    num.className = "pk-read-num";
    num.textContent = li.querySelector("b").textContent;
    read.appendChild(num);
    // on the panel's first corner the card leaves in view
    const w = num.offsetWidth, h = num.offsetHeight;
    const corners = [[r.left + 4, r.top + 4], [r.right - w - 4, r.top + 4],
                     [r.left + 4, r.bottom - h - 4], [r.right - w - 4, r.bottom - h - 4]];
    const free = ([cx, cy]) => !under(cx, cy) && !under(cx + w, cy + h) &&
      !placed.some(([px, py]) => cx < px + w && px < cx + w && cy < py + h && py < cy + h);
    const [x, y] = corners.find(free) || corners[0];
    placed.push([x, y]);
    num.style.left = (x - origin.left).toFixed(1) + "px";
    num.style.top = (y - origin.top).toFixed(1) + "px";
  }
}

// --- the presenter console ---------------------------------------------------------------------

// The console and the lesson window tell each other their frame: over a BroadcastChannel
// (any window of this page, in this browser) and by postMessage to the window that opened
// the console (a file:// page may have no channel to share). A lesson window speaks only once
// a console has said hello, and follows only a console; a console follows only a lesson
// window: two students' tabs of one lesson never drive each other.
function ptLink(p) {
  const pt = p.pt;
  pt.onMessage = (e) => {
    if (!e.source || (e.source !== pt.win && e.source !== window.opener)) return;
    ptReceive(p, e.data);
  };
  window.addEventListener("message", pt.onMessage);
  try {
    pt.channel = new BroadcastChannel(PT_CHANNEL);
    pt.channel.onmessage = (e) => ptReceive(p, e.data);
  } catch (_) { pt.channel = null; }
}

function ptPost(p, msg) {
  const pt = p.pt;
  if (pt.channel) pt.channel.postMessage(msg);
  const to = pt.console ? window.opener : pt.win;
  if (to && !to.closed) { try { to.postMessage(msg, "*"); } catch (_) { /* gone */ } }
}

function ptSend(p) {
  const pt = p.pt;
  // A console speaks once it has followed the lesson window: its own first frame, sent while
  // the lecturer already stepped on, would pull the lesson window back.
  if (!p.data || p.i < 0 || (pt.console ? !pt.followed : !pt.heard)) return;
  ptPost(p, { type: "pk-frame", from: pt.console ? "console" : "lesson",
              content: p.data.content, frame: p.i });
}

// A message from another window: hostile until checked (type, sender, lesson, frame).
function ptReceive(p, m) {
  const pt = p.pt;
  if (!m || typeof m !== "object" || typeof m.type !== "string") return;
  if (m.type === "pk-hello" && !pt.console) { pt.heard = true; ptSend(p); return; }
  if (m.type !== "pk-frame" || !Number.isSafeInteger(m.frame) || m.frame < 0) return;
  if (m.from !== (pt.console ? "lesson" : "console")) return;
  if (!p.data || m.content !== p.data.content || !p.frames) return;
  if (pt.console && !pt.followed) { pt.followed = true; ptConsoleFrame(p); }
  pt.remote = true;
  try { p.stop(); p.go(m.frame); } finally { pt.remote = false; }
}

// C: the console in a second window, on this frame, in this language.
function ptOpenConsole(p) {
  const pt = p.pt;
  if (pt.console) return;
  const u = new URL(window.location.href);
  if (p.data.standalone) {
    const h = new URLSearchParams(u.hash.replace(/^#/, ""));
    h.set("console", "1");
    h.delete("present");
    u.hash = h.toString();
  } else {
    u.searchParams.set("console", "1");
    u.searchParams.delete("present");
  }
  pt.heard = true;
  pt.win = window.open(u.href, "pk-console", "popup,width=1000,height=720");
}

function ptConsole(p) {
  const pt = p.pt, w = p.data.point || {};
  p.root.classList.add("pk-console");
  if (!pt.con) {
    pt.con = document.createElement("div");
    pt.con.className = "pk-con";
    pt.con.innerHTML = "<div class='pk-con-clock'><span class='pk-con-label'></span> " +
      "<b class='pk-con-time'></b> <span class='pk-con-since'></span></div>" +
      "<div class='pk-con-alone'></div><div class='pk-con-next'><div class='pk-con-label'>" +
      "</div><div class='pk-con-title'></div><div class='pk-con-grids'></div></div>";
    p.el("pk-caption").after(pt.con);
    pt.opened = Date.now();
    pt.clock = setInterval(() => ptTick(p), 1000);
    ptPost(p, { type: "pk-hello" });
  }
  pt.con.querySelector(".pk-con-clock .pk-con-label").textContent = w.console_clock || "";
  pt.con.querySelector(".pk-con-next .pk-con-label").textContent = w.console_next || "";
  pt.con.querySelector(".pk-con-alone").textContent = w.console_alone || "";
  document.title = w.console_title || document.title;
  pt.nextShown = undefined;
  ptTick(p);
}

function ptTick(p) {
  const pt = p.pt, w = p.data.point || {};
  const two = (n) => String(n).padStart(2, "0");
  const now = new Date(), s = Math.floor((Date.now() - pt.opened) / 1000);
  pt.con.querySelector(".pk-con-time").textContent =
    `${two(now.getHours())}:${two(now.getMinutes())}:${two(now.getSeconds())}`;
  pt.con.querySelector(".pk-con-since").textContent =
    `${two(Math.floor(s / 60))}:${two(s % 60)} ${w.console_since || ""}`;
}

// The next step: its title and frame, and both of its grids, small.
function ptConsoleFrame(p) {
  const pt = p.pt, w = p.data.point || {};
  if (!pt.con || !p.frames) return;
  pt.con.querySelector(".pk-con-alone").hidden = pt.followed;
  const next = (p.data.keyframes || []).find((k) => k.frame > p.i);
  const key = next ? next.frame : -1;
  p.root.dataset.consoleNext = key;
  if (pt.nextShown === key) return;
  pt.nextShown = key;
  const title = pt.con.querySelector(".pk-con-title"), grids = pt.con.querySelector(".pk-con-grids");
  if (!next) {
    title.textContent = w.console_none || "";
    grids.replaceChildren();
    return;
  }
  title.textContent = next.title + " · " +
    p.data.text.frame_of.replace("{i}", next.frame).replace("{last}", p.frames.length - 1);
  // the server's own grids for that frame; their pattern ids renamed, as the grids on this
  // page already use them, and not marked as the frame painted (they are the next one)
  const rec = p.frames[next.frame];
  const rename = (s) => s.replace(/id='pk-/g, "id='pkn-").replace(/url\(#pk-/g, "url(#pkn-")
    .replace(/data-pk-frame=/g, "data-pk-next=");
  grids.innerHTML = "<div>" + rename(p.pieces[rec[1]]) + "</div><div>" +
    rename(p.pieces[rec[4]]) + "</div>";
}
