// The presenter console: a second window (C) with a clock, the time since it opened, and the
// next step's title and grids, kept on the lesson window's frame. The two tell each other
// their frame over a BroadcastChannel (any window of this page, in this browser) and by
// postMessage to the window that opened the console (a file:// page may have no channel to
// share). A lesson window speaks only once a console has said hello, and follows only a
// console; a console follows only a lesson window: two students' tabs of one lesson never
// drive each other.

const PT_CHANNEL = "pk-player"; // the BroadcastChannel's name
const CONSOLE_LABEL_PX = 12.2; // the next step's grid labels, at least

// What a message from another window says, checked (it is hostile until then): "hello" (a
// console opened: a lesson window starts speaking), a frame to follow (a whole number, from
// the other kind of window, about the same ``content``), or null for anything else.
function readMessage(m, isConsole, content) {
  if (!m || typeof m !== "object" || typeof m.type !== "string") return null;
  if (m.type === "pk-hello") return isConsole ? null : "hello";
  if (m.type !== "pk-frame" || !Number.isSafeInteger(m.frame) || m.frame < 0) return null;
  if (m.from !== (isConsole ? "lesson" : "console")) return null;
  return content !== undefined && m.content === content ? m.frame : null;
}

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
  } catch (_) {
    pt.channel = null;
  }
}

function ptPost(p, msg) {
  const pt = p.pt;
  if (pt.channel) pt.channel.postMessage(msg);
  const to = pt.console ? window.opener : pt.win;
  if (to && !to.closed) {
    try {
      to.postMessage(msg, "*");
    } catch (_) {
      /* gone */
    }
  }
}

function ptSend(p) {
  const pt = p.pt;
  // A console speaks once it has followed the lesson window: its own first frame, sent while
  // the lecturer already stepped on, would pull the lesson window back.
  if (!p.data || p.i < 0 || (pt.console ? !pt.followed : !pt.heard)) return;
  ptPost(p, {
    type: "pk-frame",
    from: pt.console ? "console" : "lesson",
    content: p.data.content,
    frame: p.i,
  });
}

function ptReceive(p, m) {
  const pt = p.pt;
  const said = readMessage(m, pt.console, p.data?.content);
  if (said === "hello") {
    pt.heard = true;
    ptSend(p);
    return;
  }
  if (said === null || !p.frames) return;
  if (pt.console && !pt.followed) {
    pt.followed = true;
    ptConsoleFrame(p);
  }
  pt.remote = true;
  try {
    p.stop();
    p.go(said);
  } finally {
    pt.remote = false;
  }
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
  const pt = p.pt;
  const w = p.data.point || {};
  p.root.classList.add("pk-console");
  if (!pt.con) {
    pt.con = document.createElement("div");
    pt.con.className = "pk-con";
    pt.con.innerHTML =
      "<div class='pk-con-clock'><span class='pk-con-label'></span> " +
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
  const pt = p.pt;
  const w = p.data.point || {};
  const two = (n) => String(n).padStart(2, "0");
  const now = new Date();
  const s = Math.floor((Date.now() - pt.opened) / 1000);
  pt.con.querySelector(".pk-con-time").textContent =
    `${two(now.getHours())}:${two(now.getMinutes())}:${two(now.getSeconds())}`;
  pt.con.querySelector(".pk-con-since").textContent =
    `${two(Math.floor(s / 60))}:${two(s % 60)} ${w.console_since || ""}`;
}

// The next step: its title and frame, and both of its grids, small.
function ptConsoleFrame(p) {
  const pt = p.pt;
  const w = p.data.point || {};
  if (!pt.con || !p.frames) return;
  pt.con.querySelector(".pk-con-alone").hidden = pt.followed;
  const next = (p.data.keyframes || []).find((k) => k.frame > p.i);
  const key = next ? next.frame : -1;
  p.root.dataset.consoleNext = key;
  if (pt.nextShown === key) return;
  pt.nextShown = key;
  const title = pt.con.querySelector(".pk-con-title");
  const grids = pt.con.querySelector(".pk-con-grids");
  if (!next) {
    title.textContent = w.console_none || "";
    grids.replaceChildren();
    return;
  }
  title.textContent = `${next.title} · ${p.data.text.frame_of
    .replace("{i}", next.frame)
    .replace("{last}", p.frames.length - 1)}`;
  // the server's own grids for that frame; their pattern ids renamed, as the grids on this
  // page already use them, and not marked as the frame painted (they are the next one)
  const rec = p.frames[next.frame];
  const rename = (s) =>
    s
      .replace(/id='pk-/g, "id='pkn-")
      .replace(/url\(#pk-/g, "url(#pkn-")
      .replace(/data-pk-frame=/g, "data-pk-next=");
  grids.innerHTML = `<div>${rename(p.pieces[rec[p.slot.lg]])}</div><div>${rename(
    p.pieces[rec[p.slot.rg]],
  )}</div>`;
  // drawn small, their labels are grown to a reader's size as the lesson's own (fit_present.js)
  for (const svg of grids.querySelectorAll("svg.pk-arena")) {
    const scale = svg.getScreenCTM()?.a;
    const vb = svg.viewBox.baseVal;
    if (scale) p.growLabels(svg, CONSOLE_LABEL_PX / scale, [vb.x, vb.y, vb.width, vb.height]);
  }
}

if (typeof module === "object") {
  module.exports = { readMessage, ptLink, ptSend, ptOpenConsole, ptConsole, ptConsoleFrame };
}
