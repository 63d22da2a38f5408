// The one-file export's start (paged/viz/export/standalone.py puts it after the player's
// files, in the same module): reads the hash once, mounts the player with that frame's
// language, and swaps payloads on the language buttons; the player itself (player.js) keeps
// the hash up to date.
const PK = JSON.parse(document.getElementById("pk-data").textContent);
const hash = new URLSearchParams(location.hash.replace(/^#/, ""));
// the languages this file holds: not any key an object answers to ("constructor", "__proto__")
const known = (l) => PK.langs.includes(l);
let lang = known(hash.get("lang")) ? hash.get("lang") : PK.langs[0];
// a frame is digits, as the app reads it (parseInt took "1e3" as 1 and "3.9" as 3)
const frameOf = (s) => (/^[0-9]+$/.test(s || "") ? Number(s) : NaN);
const start = frameOf(hash.get("frame")) || 0;
const present = hash.get("present") === "1";
// still=1: the frames are being photographed (an animation export): no transient hint
const still = hash.get("still") === "1";
function show(l) {
  lang = l;
  document.documentElement.lang = l === "zh" ? "zh-Hans" : "en";
  document.title = PK.titles[l];
  document.getElementById("pk-sa-title").textContent = PK.titles[l];
  document.getElementById("pk-sa-note").textContent = PK.notes[l];
  for (const b of document.querySelectorAll(".pk-sa-lang button")) {
    b.classList.toggle("on", b.dataset.lang === l);
  }
  mountPlayer({
    data: {
      ...PK.payloads[l],
      start,
      present,
      still,
      follow: false,
      standalone: true,
      home_lang: PK.langs[0],
    },
    parentElement: document.getElementById("pk-sa-player"),
  });
}
document.querySelectorAll(".pk-sa-lang button").forEach((b) => {
  b.onclick = () => {
    show(b.dataset.lang);
    b.blur();
  };
});
window.addEventListener("hashchange", () => {
  const h = new URLSearchParams(location.hash.replace(/^#/, ""));
  const l = h.get("lang") || PK.langs[0];
  const f = frameOf(h.get("frame"));
  const p = window.pkPlayer;
  // the frame first: another language loads asynchronously and keeps the frame shown then
  if (p && !Number.isNaN(f)) p.go(f);
  if (known(l) && l !== lang) show(l);
  // a hash that names a frame also says the mode (the player writes present=1 when on)
  const pr = h.get("present") === "1";
  if (p && !Number.isNaN(f) && p.present !== pr) p.setPresent(pr);
});
show(lang);
