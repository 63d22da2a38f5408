// Playing the frames by themselves (Space), at a speed + and − choose, and scrubbing the
// timeline with the pointer. Methods of the Player (player.js).

const Playing = {
  setSpeed(d) {
    this.speed = nextSpeed(this.speed, d);
    this.showSpeed();
  },

  showSpeed() {
    const fps = SPEEDS[this.speed];
    const s = this.el("pk-speed");
    s.textContent = this.data.text.speed.replace("{fps}", fps);
    s.dataset.fps = fps;
    const b = this.el("pk-play");
    b.textContent = this.playing ? `❚❚ ${this.data.text.pause}` : `▶ ${this.data.text.play}`;
    this.root.dataset.playing = this.playing ? "1" : "0";
  },

  toggle() {
    if (this.playing) this.stop();
    else this.play();
  },

  play() {
    if (this.i >= this.frames.length - 1) this.go(0);
    this.playing = true;
    this.showSpeed();
    let acc = 0,
      prev = performance.now();
    const tick = (now) => {
      if (!this.playing) return;
      acc += now - prev;
      prev = now;
      const every = 1000 / SPEEDS[this.speed];
      while (acc >= every) {
        acc -= every;
        if (this.i >= this.frames.length - 1) {
          this.stop();
          return;
        }
        this.go(this.i + 1);
      }
      this.raf = requestAnimationFrame(tick);
    };
    this.raf = requestAnimationFrame(tick);
  },

  stop() {
    if (!this.playing) return;
    this.playing = false;
    cancelAnimationFrame(this.raf);
    this.showSpeed();
  },

  scrubber() {
    const box = this.el("pk-tl-box");
    const at = (e) => {
      const svg = box.querySelector("svg");
      const r = svg.getBoundingClientRect();
      const w = Number(svg.dataset.width),
        l = Number(svg.dataset.left),
        rr = Number(svg.dataset.right);
      const x0 = r.left + (r.width * l) / w,
        x1 = r.right - (r.width * rr) / w;
      const f = (e.clientX - x0) / Math.max(1, x1 - x0);
      return Math.floor(f * this.frames.length);
    };
    box.onpointerdown = (e) => {
      this.stop();
      box.setPointerCapture(e.pointerId);
      this.scrubbing = true;
      this.go(at(e));
      e.preventDefault();
    };
    box.onpointermove = (e) => {
      if (this.scrubbing) this.go(at(e));
    };
    box.onpointerup = box.onpointercancel = (e) => {
      this.scrubbing = false;
      try {
        box.releasePointerCapture(e.pointerId);
      } catch (_) {
        /* already released */
      }
    };
  },
};

if (typeof module === "object") module.exports = { Playing };
