// The player's pointing aids, hooked into it: pointing at a request (pointing.js), the
// presenter console (console.js) and the reading page (reading.js). player.js calls each
// point* function at its moment: once built, on each payload, on each frame, on each key.

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
  p.pt = {
    focus: null,
    kbd: false,
    remote: false,
    heard: false,
    followed: false,
    console: params.console,
    still: params.still,
    win: null,
    read: null,
  };
  const pt = p.pt;
  const main = p.el("pk-main");
  const layer = document.createElement("div");
  layer.className = "pk-pt-layer";
  layer.setAttribute("aria-hidden", "true");
  layer.innerHTML =
    "<svg class='pk-pt-arrows'><defs><marker id='pk-pt-head' viewBox='0 0 10 10'" +
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
  pt.onLeave = () => {
    if (!pt.kbd) ptFocus(p, null, false);
  };
  pt.onIn = (e) => {
    const r = ptReqOf(p, e.target);
    if (r !== null) ptFocus(p, r, true);
  };
  pt.onOut = (e) => {
    const gone = e.target;
    // a frame swap removes the chip that had the focus: the request stays pointed at, and
    // the next frame's chip for it takes the focus (ptMark)
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
  pt.onDown = () => {
    if (!pt.read.hidden) ptRead(p, false);
  };
  document.addEventListener("pointerdown", pt.onDown, true);
  // the arrows and sentences follow the boxes they join (a resize, presenter mode, fonts)
  pt.resized = new ResizeObserver(() =>
    requestAnimationFrame(() => {
      ptPlace(p);
      ptReadNumbers(p);
    }),
  );
  pt.resized.observe(main);
  ptLink(p);
}

// Called by Player.static(): the payload's words, the keys' help, the console, the reading page.
function pointStatic(p) {
  const pt = p.pt;
  const w = p.data.point || {};
  pt.read.innerHTML = p.data.reading || "";
  const table = p.el("pk-help").querySelector("table");
  if (table && w.key_focus) {
    const rows = [
      [["R"], w.key_focus],
      [["C"], w.key_console],
      [["H"], w.key_read],
    ];
    for (const [keys, text] of rows) {
      const tr = document.createElement("tr");
      const k = document.createElement("td");
      const v = document.createElement("td");
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

// Called by Player.go() on every frame shown.
function pointFrame(p) {
  const pt = p.pt;
  if (!pt) return;
  if (pt.focus !== null) ptMark(p);
  ptPlace(p);
  if (pt.console) ptConsoleFrame(p);
  if (!pt.remote) ptSend(p);
}

// A key's ``command`` (stepping.js KEYS) for these aids; true when it was one. Called by
// Player.act() before its own: any key closes the reading page, and H and Escape only close it.
function pointAct(p, command) {
  const pt = p.pt;
  if (!pt.read.hidden) {
    ptRead(p, false);
    if (command === "read" || command === "escape") return true;
  }
  if (command === "request-next") ptNextRequest(p, 1);
  else if (command === "request-prev") ptNextRequest(p, -1);
  else if (command === "console") ptOpenConsole(p);
  else if (command === "read") ptRead(p, true);
  else if (command === "escape" && pt.focus !== null) ptFocus(p, null, false);
  else return false;
  return true;
}

// What the aids keep in a one-file export's hash (player.js hashUrl): a console stays one
// when reloaded, a still page still.
function pointHash(p) {
  const pt = p.pt;
  return (pt?.console ? "&console=1" : "") + (pt?.still ? "&still=1" : "");
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

if (typeof module === "object") {
  module.exports = { pointInit, pointStatic, pointFrame, pointAct, pointHash, pointDestroy };
}
