// What a payload sets once on the page, and not per frame: the side titles, the legend, the
// scoreboard, the timeline, a button per lesson step and the keys' help, in the payload's
// language. Methods of the Player (player.js).

const Static = {
  static() {
    const d = this.data,
      t = d.text;
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
        b.onclick = () => {
          this.stop();
          this.go(d.chapters[s.chapter].start);
        };
      }
      nav.appendChild(b);
    });
    const help = [
      ["← →", t.key_arrows],
      ["PageUp PageDown", t.key_pages],
      ["Home End", t.key_home_end],
      ["Space", t.key_space],
      ["+ −", t.key_speed],
      ["F", t.key_f],
      ["T", t.key_theme],
      ["?", t.key_help],
      ["", t.key_timeline],
    ].filter(([, v]) => v !== undefined);
    this.el("pk-help").innerHTML =
      "<div><h3>" +
      esc(t.help_title) +
      "</h3><table>" +
      help
        .map(
          ([k, v]) =>
            "<tr><td>" +
            k
              .split(" ")
              .filter(Boolean)
              .map((x) => `<kbd>${esc(x)}</kbd>`)
              .join(" ") +
            "</td><td>" +
            esc(v) +
            "</td></tr>",
        )
        .join("") +
      "</table><p class='pk-dim'>" +
      esc(t.help_close) +
      "</p></div>";
    this.el("pk-help").onclick = () => this.help(false);
    this.el("pk-help-btn").onclick = () => this.help();
    this.el("pk-play").onclick = () => this.toggle();
    this.scrubber();
    this.showSpeed();
    pointStatic(this);
    askStatic(this);
  },
};

if (typeof module === "object") module.exports = { Static };
