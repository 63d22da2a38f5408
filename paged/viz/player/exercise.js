// Exercise mode's logic, as pure functions of the payload's questions (payload.py
// exercises_data): which frame stops the player, what a key or a typed line answers, whether an
// answer is right and how it reads. No DOM, so Node's test runner checks them (tests/js);
// asking.js puts them on the page. Every string a question carries is HTML already (escaped by
// the server: a request's name comes from the trace); what a student types is escaped here.

const MAX_TYPED = 200; // characters of a typed answer read at all: a paste of a novel is junk

// Replace each {name} of ``template`` with ``values[name]`` (a placeholder without a value stays).
function fill(template, values) {
  return String(template).replace(/\{(\w+)\}/g, (m, k) =>
    Object.hasOwn(values, k) ? String(values[k]) : m,
  );
}

function escHtml(s) {
  return String(s).replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c],
  );
}

// The questions asked at frame ``i`` not yet answered (``done``: a Map from question id), in
// the payload's order.
function openAt(questions, done, i) {
  return (questions || []).filter((q) => q.frame === i && !done.has(q.id));
}

// Where a step forward from ``from`` to ``to`` stops: at the first frame after ``from`` with a
// question still open, if that comes before ``to``. A step back is never stopped.
function stopAt(questions, done, from, to) {
  if (!(to > from)) return to;
  let stop = to;
  for (const q of questions || []) {
    if (q.frame > from && q.frame < stop && !done.has(q.id)) stop = q.frame;
  }
  return stop;
}

// The value a key answers ``q`` with (undefined: none): 1..9 the nth choice, y and n yes and no.
function keyAnswer(q, key) {
  if (q.form !== "yesno" && q.form !== "choose") return undefined;
  const values = q.choices.map((c) => c.value);
  if (q.form === "yesno" && (key === "y" || key === "Y")) return "yes";
  if (q.form === "yesno" && (key === "n" || key === "N")) return "no";
  if (/^[1-9]$/.test(key) && Number(key) <= values.length) return values[Number(key) - 1];
  return undefined;
}

// A typed whole number, or null for anything else (a fraction, a word, an empty line).
function parseNumber(text) {
  const t = String(text).slice(0, MAX_TYPED).trim();
  if (!/^-?\d{1,9}$/.test(t)) return null;
  return Number(t);
}

// Typed cell numbers ("5", "#0, #1 2"), sorted and once each, or null when any is not a cell of
// a grid of ``cells``.
function parseCells(text, cells) {
  const parts = String(text)
    .slice(0, MAX_TYPED)
    .split(/[\s,;]+/)
    .filter(Boolean);
  const out = new Set();
  for (const part of parts) {
    const m = /^#?(\d{1,7})$/.exec(part);
    if (!m || Number(m[1]) >= cells) return null;
    out.add(Number(m[1]));
  }
  return [...out].sort((a, b) => a - b);
}

// The cell of ``grid`` (payload: x0, cell, pitch, cols, per) at user-space point (x, y), or -1
// off the grid; a block question's cell is the block whose slots include that point.
function cellAt(grid, cells, x, y) {
  const col = Math.floor((x - grid.x0) / grid.cell);
  const row = Math.floor(y / grid.pitch);
  if (!(col >= 0 && col < grid.cols && row >= 0)) return -1;
  const k = Math.floor((row * grid.cols + col) / grid.per);
  return k < cells ? k : -1;
}

// The rectangles (user units) that cover cell ``k`` of ``grid``: a block never wraps a row.
function cellBox(grid, k) {
  const slot = k * grid.per;
  const col = slot % grid.cols;
  const row = Math.floor(slot / grid.cols);
  return {
    x: grid.x0 + col * grid.cell,
    y: row * grid.pitch,
    w: grid.per * grid.cell - grid.gap,
    h: grid.pitch - grid.gap,
  };
}

// Whether ``given`` answers ``q`` (the server's exercises.grade, in the browser): anything
// malformed is simply wrong.
function isRight(q, given) {
  if (q.form === "cells") {
    if (!Array.isArray(given) || !given.every(Number.isInteger)) return false;
    const a = new Set(q.answer);
    const g = new Set(given);
    return a.size === g.size && [...g].every((v) => a.has(v));
  }
  if (q.form === "number") return Number.isInteger(given) && given === q.answer;
  return typeof given === "string" && given === q.answer;
}

// An answer as the student reads it, as HTML: a choice by its label, a block as #n, a slot by
// ``words.ex_slot``.
function answerHtml(q, value, words) {
  if (q.form === "cells") {
    if (!Array.isArray(value) || !value.length) return "–";
    return value
      .map((v) => (q.unit === "block" ? `#${escHtml(v)}` : fill(words.ex_slot, { n: escHtml(v) })))
      .join(", ");
  }
  if (q.form === "number") return escHtml(value);
  const c = q.choices.find((x) => x.value === value);
  return c ? c.label : escHtml(value);
}

// The score so far: answered right, answered (shown counts, wrongly), and asked in all.
function tally(questions, done) {
  let right = 0;
  for (const r of done.values()) if (r.right) right++;
  return { right, answered: done.size, total: (questions || []).length };
}

if (typeof module === "object") {
  module.exports = {
    fill,
    escHtml,
    openAt,
    stopAt,
    keyAnswer,
    parseNumber,
    parseCells,
    cellAt,
    cellBox,
    isRight,
    answerHtml,
    tally,
  };
}
