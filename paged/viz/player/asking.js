// Exercise mode on the page: at a question's frame the player stops and asks, the student
// answers (a key, a click, a typed number, cells clicked on the grid), and the next frame shows
// the answer with one sentence of why; a score at the end. Grading is exercise.js's, with the
// answers the payload carries: no server. player.js calls each ask* hook at its moment: once
// built, on each payload, on each frame, on each key.

const GRID_OF = { left: "pk-lg", right: "pk-rg" };
const FORWARD = new Set(["next", "step-next", "last", "play"]);

function askInit(p) {
  const ex = { on: false, done: new Map(), asking: [], picked: [], fed: [], note: "" };
  p.ex = ex;
  ex.panel = document.createElement("div");
  ex.panel.className = "pk-ex";
  ex.panel.id = "pk-ex";
  ex.panel.hidden = true;
  ex.panel.setAttribute("role", "region");
  ex.panel.setAttribute("aria-live", "polite");
  p.el("pk-main").before(ex.panel);
  ex.btn = document.createElement("button");
  ex.btn.type = "button";
  ex.btn.className = "pk-p-btn pk-ex-btn";
  ex.btn.id = "pk-ex-btn";
  ex.btn.setAttribute("aria-keyshortcuts", "E");
  ex.btn.onclick = () => askToggle(p, !ex.on);
  p.el("pk-help-btn").before(ex.btn);
  ex.panel.addEventListener("click", (e) => askClick(p, e));
  ex.onGrid = (e) => askGridClick(p, e);
  p.el("pk-sides").addEventListener("click", ex.onGrid);
  followInit(p); // follow.js: a follower's page follows the lecturer
}

// Called by Player.static(): a new payload. The same trace in another language keeps the
// answers given (a question's id is the same in both); another trace starts afresh.
function askStatic(p) {
  const ex = p.ex;
  const d = p.data;
  if (ex.content !== d.content) {
    ex.content = d.content;
    ex.done = new Map();
    ex.asking = [];
    ex.fed = [];
  }
  ex.words = d.exercise_text || {};
  ex.questions = d.exercises || [];
  ex.btn.innerHTML = ex.words.ex_mode || "";
  ex.btn.hidden = !ex.questions.length;
  if (!ex.questions.length && ex.on) askToggle(p, false);
  if (p.follow && ex.questions.length) ex.on = true; // a follower answers at every question
  const table = p.el("pk-help").querySelector("table");
  if (table && ex.questions.length) {
    const tr = document.createElement("tr");
    tr.innerHTML = `<td><kbd>E</kbd></td><td>${ex.words.ex_key}</td>`;
    table.appendChild(tr);
  }
  classStatic(p);
}

function askToggle(p, on) {
  const ex = p.ex;
  ex.on = on;
  ex.asking = [];
  ex.fed = [];
  ex.note = on ? ex.words.ex_on : "";
  ex.btn.setAttribute("aria-pressed", on ? "true" : "false");
  p.root.dataset.exercise = on ? "1" : "0";
  askFrame(p);
}

// Called by Player.go() on every frame shown: ask what this frame asks, or say how the last
// answers went if this frame answers them.
function askFrame(p) {
  const ex = p.ex;
  if (!ex) return;
  classFrame(p);
  const lead = p.follow?.state?.frame;
  if (lead !== undefined && lead !== p.i) {
    p.go(lead); // a follower shows the lecturer's frame, whatever was stepped
    return;
  }
  ex.fed = ex.fed.filter((r) => r.q.frame + 1 === p.i || (p.follow && r.q.frame === p.i));
  ex.asking = ex.on ? openAt(ex.questions, ex.done, p.i) : [];
  ex.picked = [];
  if (ex.asking.length) p.stop();
  askDraw(p);
}

function askDraw(p) {
  const ex = p.ex;
  ex.panel.hidden = !ex.on;
  p.root.dataset.asking = ex.asking.length ? ex.asking[0].id : "";
  for (const side of ["left", "right"]) {
    p.el(`pk-${side}`).classList.toggle("pk-ex-asked", ex.asking[0]?.side === side);
  }
  if (!ex.on) return;
  const w = ex.words;
  const fb = ex.fed
    .map(({ q, right, given, shown }) => {
      if (!followRevealed(p, q)) {
        return `<p class='pk-ex-fb pk-ex-sent' data-q='${q.id}'>${fill(w.ex_sent, { given: answerHtml(q, given, w) })}</p>`;
      }
      const answer = answerHtml(q, q.answer, w);
      const head = shown
        ? fill(w.ex_shown, { answer })
        : fill(right ? w.ex_right : w.ex_wrong, { answer, given: answerHtml(q, given, w) });
      const cls = right ? "pk-ex-ok" : "pk-ex-no";
      return `<p class='pk-ex-fb ${cls}' data-q='${q.id}'><b>${head}</b> ${q.why}</p>`;
    })
    .join("");
  const q = ex.asking[0];
  // a follower's answer counts once the lecturer has revealed it: not before, by its score
  const t = tally(ex.questions, new Map([...ex.done].filter(([, r]) => followRevealed(p, r.q))));
  const end = t.answered === t.total || p.i === p.frames.length - 1;
  const status = end
    ? `<b class='pk-ex-score'>${fill(w.ex_score, t)}</b> <button type='button' data-act='again'>${w.ex_again}</button>`
    : fill(w.ex_progress, { n: Math.min(t.answered + 1, t.total), total: t.total, right: t.right });
  ex.panel.innerHTML =
    fb +
    (q ? askQuestionHtml(p, q) : "") +
    `<p class='pk-ex-status'>${ex.note ? `${ex.note} ` : ""}${status}</p>`;
  for (const r of ex.fed) {
    if (r.q.form === "cells" && followRevealed(p, r.q)) askMark(p, r.q, r.q.answer, "pk-ex-key");
  }
  if (q?.form === "cells") askMark(p, q, ex.picked, "pk-ex-pick");
  const input = ex.panel.querySelector("input");
  if (input) {
    input.addEventListener("keydown", (e) => askTyped(p, e));
    if (!p.still) input.focus({ preventScroll: true });
  }
}

function askQuestionHtml(p, q) {
  const w = p.ex.words;
  const side = p.data.text[q.side];
  let controls;
  if (q.form === "yesno" || q.form === "choose") {
    controls = `${q.choices
      .map((c, n) => `<button type='button' data-n='${n}'><kbd>${n + 1}</kbd> ${c.label}</button>`)
      .join(" ")} <span class='pk-dim'>${fill(w.ex_choose, { n: q.choices.length })}</span>`;
  } else {
    const hint =
      q.form === "cells"
        ? fill(w.ex_cells, { side: escHtml(side), last: q.cells - 1 })
        : w.ex_number;
    controls =
      `<input type='text' inputmode='numeric' autocomplete='off' maxlength='200' ` +
      `aria-label='${escHtml(q.prompt)}' value='${p.ex.picked.join(", ")}'> ` +
      `<button type='button' data-act='answer'>${w.ex_answer}</button> ` +
      `<span class='pk-dim'>${hint}</span>`;
  }
  return (
    `<div class='pk-ex-q' data-q='${q.id}' data-form='${q.form}'>` +
    `<p class='pk-ex-prompt'><b class='pk-p-tag'>${escHtml(side)}</b> ${q.prompt}</p>` +
    `<div class='pk-ex-ctl'>${controls} <button type='button' data-act='show'>` +
    `<kbd>S</kbd> ${w.ex_show}</button></div></div>`
  );
}

// One answer to the question being asked (``shown``: the student asked to see it). The frame
// stays until every question it asks is answered, then the next frame shows the answers.
function askAnswer(p, given, shown) {
  const ex = p.ex;
  const q = ex.asking.shift();
  if (!q) return;
  const right = !shown && isRight(q, given);
  ex.done.set(q.id, { right, given, q });
  ex.fed.push({ q, right, given, shown });
  ex.note = "";
  ex.picked = [];
  if (followSend(p, q, shown ? undefined : given))
    askDraw(p); // the lecturer steps on
  else if (ex.asking.length) askDraw(p);
  else if (p.i + 1 < p.frames.length) p.go(p.i + 1);
  else askDraw(p);
}

function askTyped(p, e) {
  if (e.key === "Escape") e.target.blur();
  if (e.key !== "Enter") return;
  e.preventDefault();
  askSubmit(p);
}

// The typed line answers a number or cells question; junk says what is wanted, and waits.
function askSubmit(p) {
  const ex = p.ex;
  const q = ex.asking[0];
  const input = ex.panel.querySelector("input");
  if (!q || !input) return;
  const given = q.form === "cells" ? parseCells(input.value, q.cells) : parseNumber(input.value);
  if (given === null) {
    ex.note = fill(ex.words.ex_junk, { last: Math.max(0, q.cells - 1) });
    const keep = input.value;
    askDraw(p);
    ex.panel.querySelector("input").value = keep;
    return;
  }
  askAnswer(p, given, false);
}

function askClick(p, e) {
  const b = e.target.closest("button");
  if (!b || !p.ex.panel.contains(b)) return;
  const act = b.dataset.act;
  if (act === "again") {
    p.ex.done = new Map();
    p.ex.fed = [];
    p.go(0);
    askFrame(p);
  } else if (act === "show") askAnswer(p, undefined, true);
  else if (act === "answer") askSubmit(p);
  else if (b.dataset.n !== undefined) {
    const c = p.ex.asking[0]?.choices[Number(b.dataset.n)];
    if (c) askAnswer(p, c.value, false);
  }
}

// A click on the grid being asked about picks or unpicks the cell under it.
function askGridClick(p, e) {
  const q = p.ex.asking[0];
  if (q?.form !== "cells") return;
  const svg = p.el(GRID_OF[q.side]).querySelector("svg.pk-arena");
  if (!svg?.contains(e.target)) return;
  const m = svg.getScreenCTM();
  if (!m) return;
  const at = new DOMPoint(e.clientX, e.clientY).matrixTransform(m.inverse());
  const k = cellAt(q.grid, q.cells, at.x, at.y);
  if (k < 0) return;
  const picked = p.ex.picked;
  const n = picked.indexOf(k);
  if (n >= 0) picked.splice(n, 1);
  else picked.push(k);
  picked.sort((a, b) => a - b);
  const input = p.ex.panel.querySelector("input");
  if (input) input.value = picked.join(", ");
  askMark(p, q, picked, "pk-ex-pick");
}

// Outline cells ``ks`` of ``q``'s grid (its picks, or the answer on the answering frame).
function askMark(p, q, ks, cls) {
  const svg = p.el(GRID_OF[q.side]).querySelector("svg.pk-arena");
  if (!svg || !q.grid) return;
  svg.querySelector(`g.${cls}`)?.remove();
  const g = document.createElementNS(svg.namespaceURI, "g");
  g.setAttribute("class", cls);
  for (const k of ks) {
    const b = cellBox(q.grid, k);
    const r = document.createElementNS(svg.namespaceURI, "rect");
    for (const [a, v] of Object.entries({ x: b.x, y: b.y, width: b.w, height: b.h })) {
      r.setAttribute(a, String(v));
    }
    r.dataset.cell = String(k);
    g.appendChild(r);
  }
  svg.appendChild(g);
}

// A key in exercise mode (before the player's own; true when it was taken): E toggles the
// mode; while a question is asked, 1–9 / Y / N answer, S shows the answer, Enter or Space
// press the focused button, and a step forward waits for the answer. A step forward over a
// question still to be asked stops at it.
function askAct(p, k) {
  const ex = p.ex;
  if (!ex?.questions?.length) return false;
  if (k === "e" || k === "E") {
    askToggle(p, !ex.on);
    return true;
  }
  if (!ex.on) return false;
  const q = ex.asking[0];
  const command = KEYS.get(k);
  const focused = document.activeElement;
  if ((k === "Enter" || k === " ") && focused?.tagName === "BUTTON" && ex.panel.contains(focused)) {
    focused.click();
    return true;
  }
  if (q) {
    const v = keyAnswer(q, k);
    if (v !== undefined) askAnswer(p, v, false);
    else if (k === "s" || k === "S") askAnswer(p, undefined, true);
    else if (k === "Enter") askSubmit(p);
    else if (FORWARD.has(command)) {
      ex.note = ex.words.ex_first;
      askDraw(p);
    } else if (command === "escape") askToggle(p, false);
    else return false;
    return true;
  }
  if (command === "escape") {
    askToggle(p, false);
    return true;
  }
  const keyframes = (p.data.keyframes || []).map((kf) => kf.frame);
  const to = landing(command, p.i, p.frames.length, p.data.chapters, keyframes);
  if (to === undefined) return false;
  const stop = stopAt(ex.questions, ex.done, p.i, to);
  if (stop === to) return false;
  p.stop();
  p.go(stop);
  return true;
}

function askDestroy(p) {
  p.el("pk-sides")?.removeEventListener("click", p.ex?.onGrid);
  clearInterval(p.cls?.timer);
  p.follow?.src?.close();
}

if (typeof module === "object") {
  module.exports = { askInit, askStatic, askFrame, askAct, askToggle, askDestroy };
}
