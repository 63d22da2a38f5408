// The class answers together (paged/viz/classroom/routes.py). A follower's page (it carries
// #pk-follow) shows the lecturer's frame as it changes and sends its answers to the server
// instead of stepping on; the answer shows when the lecturer reveals it. The lecturer's page
// (the app in classroom mode: the payload says ``classroom``) opens a room, sends each frame,
// and at a question shows the live distribution, a bar per choice or a heat map over the cells,
// then reveals. asking.js calls each follow* hook.

const TALLY_MS = 700; // how often the lecturer's page reads the distribution at a question

function followInit(p) {
  const tag = document.getElementById("pk-follow");
  if (!tag) return;
  let code;
  try {
    code = JSON.parse(tag.textContent).code;
  } catch (_) {
    return;
  }
  if (!/^[A-Z0-9]{5}$/.test(code || "")) return;
  p.follow = { code, token: null, state: null, base: `/pk/class/${code}` };
  const src = new EventSource(`${p.follow.base}/events`);
  const on = (e) => followState(p, JSON.parse(e.data));
  src.addEventListener("hello", on);
  src.onmessage = on;
  p.follow.src = src;
}

// A state from the room: the frame shown, the questions asked and revealed there.
function followState(p, s) {
  const f = p.follow;
  if (s.token) f.token = s.token;
  f.state = s;
  if (!p.frames) return; // the first frames are unpacking: load() shows this one
  if (!p.ex.on) askToggle(p, true);
  if (s.frame !== p.i) p.go(s.frame);
  else askDraw(p);
}

// A follower's answer goes to the room; true when it was sent (the frame does not move).
function followSend(p, q, given) {
  const f = p.follow;
  if (!f) return false;
  if (given !== undefined && f.token) {
    fetch(`${f.base}/answer`, {
      method: "POST",
      body: JSON.stringify({ token: f.token, q: q.id, a: given }),
    }).catch(() => {});
  }
  return true;
}

// Whether ``q``'s answer may show: always alone; following, once the lecturer revealed it.
function followRevealed(p, q) {
  const s = p.follow?.state;
  return !s || s.revealed.includes(q.id) || s.frame > q.frame;
}

// --- the lecturer ---------------------------------------------------------------------------

function classStatic(p) {
  const ex = p.ex;
  if (p.cls && p.cls.lesson !== p.data.lesson) {
    // another lesson on the lecturer's page: the room follows the one it was opened for, so
    // this page stops steering it (a new link opens a room for the new lesson)
    clearInterval(p.cls.timer);
    p.cls = null;
    ex.classBox.hidden = true;
  }
  if (!p.data.classroom || p.follow || ex.classBtn) return;
  const b = document.createElement("button");
  b.type = "button";
  b.className = "pk-p-btn pk-class-btn";
  b.innerHTML = ex.words.ex_class || "";
  b.onclick = () => classOpen(p);
  p.el("pk-help-btn").before(b);
  ex.classBtn = b;
  ex.classBox = document.createElement("div");
  ex.classBox.className = "pk-class";
  ex.classBox.hidden = true;
  ex.classBox.setAttribute("aria-live", "polite");
  ex.panel.after(ex.classBox);
  ex.classBox.addEventListener("click", (e) => {
    const b = e.target.closest("button[data-reveal]");
    if (b) classReveal(p);
  });
}

async function classOpen(p) {
  if (p.cls) return;
  const r = await fetch("/pk/class/new", {
    method: "POST",
    body: JSON.stringify({ lesson: p.data.lesson, lang: p.data.lang }),
  });
  const got = await r.json();
  if (!r.ok) {
    p.ex.classBox.hidden = false;
    p.ex.classBox.textContent = got.error || String(r.status);
    return;
  }
  p.cls = { ...got, lesson: p.data.lesson, tallies: {}, sent: -1 };
  if (p.ex.on) askToggle(p, false);
  classFrame(p);
  p.cls.timer = setInterval(() => classPoll(p), TALLY_MS);
}

function classPost(p, what, body) {
  return fetch(`/pk/class/${p.cls.code}/${what}`, {
    method: "POST",
    body: JSON.stringify({ key: p.cls.key, ...body }),
  });
}

// Called on every frame shown: the room follows the lecturer's frame.
function classFrame(p) {
  const c = p.cls;
  if (!c) return;
  if (c.sent !== p.i) {
    c.sent = p.i;
    classPost(p, "frame", { frame: p.i }).catch(() => {});
  }
  c.tallies = {};
  classDraw(p);
}

async function classPoll(p) {
  const c = p.cls;
  const asked = openAt(p.ex.questions, new Map(), p.i);
  for (const q of asked) {
    const r = await classPost(p, "tally", { q: q.id }).catch(() => null);
    if (r?.ok && p.i === q.frame) c.tallies[q.id] = await r.json();
  }
  if (asked.length) classDraw(p);
}

async function classReveal(p) {
  const asked = openAt(p.ex.questions, new Map(), p.i);
  for (const q of asked) await classPost(p, "reveal", { q: q.id }).catch(() => {});
  p.cls.revealed = p.i;
  classDraw(p);
}

// The link and code, and at a question its live distribution: a bar per choice (or number
// given), a heat map over the grid's cells; once revealed, the answer.
function classDraw(p) {
  const c = p.cls;
  const box = p.ex.classBox;
  if (!c) return;
  const w = p.ex.words;
  box.hidden = false;
  const link = c.link || `${window.location.origin}${c.follow}`;
  let html = `<p class='pk-class-link'>${fill(w.ex_class_link, { link: escHtml(link), code: `<b>${escHtml(c.code)}</b>` })}</p>`;
  const asked = openAt(p.ex.questions, new Map(), p.i);
  for (const q of asked) {
    const t = c.tallies[q.id] || { n: 0, bars: [], cells: [] };
    const shown = c.revealed === p.i;
    html += `<div class='pk-class-q' data-q='${q.id}'><p>${q.prompt} <span class='pk-dim'>${fill(w.ex_class_n, { n: t.n })}</span></p>`;
    // cells: the most picked, as bars beside the heat map (which the grid shows)
    const bars =
      t.bars ||
      (t.cells || [])
        .map((n, k) => [[k], n])
        .filter(([, n]) => n > 0)
        .sort((a, b) => b[1] - a[1])
        .slice(0, 8);
    if (bars.length) {
      const most = Math.max(1, ...bars.map((b) => b[1]));
      html += bars
        .map(([v, n]) => {
          const key = shown && isRight(q, v) ? " pk-class-right" : "";
          return (
            `<div class='pk-class-bar${key}'><span>${answerHtml(q, v, w)}</span>` +
            `<i style='width:${((100 * n) / most).toFixed(1)}%'></i><b>${n}</b></div>`
          );
        })
        .join("");
    }
    if (shown)
      html += `<p><b>${fill(w.ex_shown, { answer: answerHtml(q, q.answer, w) })}</b> ${q.why}</p>`;
    html += "</div>";
    if (t.cells) classHeat(p, q, t.cells);
  }
  if (asked.length && c.revealed !== p.i) {
    html += `<button type='button' data-reveal='1'>${w.ex_reveal}</button>`;
  }
  // drawn again only when it changed: a tally polled twice a second must not replace the
  // reveal button under the lecturer's pointer (a click on a detached button is lost)
  if (c.drawn === html) return;
  c.drawn = html;
  box.innerHTML = html;
}

// How many picked each cell, as the cell's shade of ink over the grid.
function classHeat(p, q, counts) {
  const most = Math.max(1, ...counts);
  const picked = counts.map((n, k) => [k, n]).filter(([, n]) => n > 0);
  askMark(
    p,
    q,
    picked.map(([k]) => k),
    "pk-class-heat",
  );
  const rects = p.el(GRID_OF[q.side]).querySelectorAll("g.pk-class-heat rect");
  rects.forEach((r, n) => {
    r.setAttribute("fill-opacity", (0.15 + (0.7 * picked[n][1]) / most).toFixed(2));
  });
}

if (typeof module === "object") {
  module.exports = { followInit, followSend, followRevealed, classStatic, classFrame };
}
