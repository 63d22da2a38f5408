// The keys: each is acted on as it arrives (none is dropped), the ones pressed while the first
// frames unpack are kept for them, and a key a widget of the page moves its own selection with
// is left to it. Where a stepping key lands is stepping.js's. Methods of the Player (player.js).

// Widgets that move their own selection with these keys (the scenario lab's table, a slider,
// tabs, a list): a key meant for them is theirs, not a step of the lesson.
const OWN_KEYS =
  "[role=grid], [role=treegrid], [role=slider], [role=tablist], [role=listbox], " +
  "[role=combobox], [role=menu], [role=radiogroup], [role=spinbutton]";

const Keys = {
  key(e) {
    if (!this.root.isConnected) return;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const tag = e.target?.tagName || "";
    if (/^(INPUT|TEXTAREA|SELECT)$/.test(tag) || e.target?.isContentEditable) return;
    if (e.target?.closest?.(OWN_KEYS)) return;
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
  },

  // Do what key ``k`` says; false when it says nothing to the player.
  act(k) {
    if (!this.el("pk-help").hidden && k !== "?" && k !== "Escape") {
      // over the help, a player key only closes it: a step taken behind it would go unseen
      if (!PLAYER_KEYS.has(k)) return false;
      this.help(false);
      return true;
    }
    if (askAct(this, k)) return true; // asking.js: exercise mode answers first
    const command = KEYS.get(k);
    if (pointAct(this, command)) return true;
    const keyframes = (this.data.keyframes || []).map((kf) => kf.frame);
    const to = landing(command, this.i, this.frames.length, this.data.chapters, keyframes);
    if (to !== undefined) {
      this.stop();
      this.go(to);
    } else if (command === "play") {
      this.toggle();
      this.flash();
    } else if (command === "faster" || command === "slower") {
      this.setSpeed(command === "faster" ? 1 : -1);
      this.flash();
    } else if (command === "theme" && this.data.text.key_theme !== undefined) {
      this.setTheme(!this.theme);
    } else if (command === "present") this.setPresent(!this.present);
    else if (command === "help") this.help();
    else if (command === "escape" && !this.el("pk-help").hidden) this.help(false);
    else if (command === "escape" && this.present) this.setPresent(false);
    else return false;
    return true;
  },

  help(show) {
    const h = this.el("pk-help");
    h.hidden = show === undefined ? !h.hidden : !show;
    this.root.dataset.help = h.hidden ? "0" : "1";
  },
};

if (typeof module === "object") module.exports = { Keys };
