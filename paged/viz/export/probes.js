// What Playwright reads and drives a player page with: the test server's waits
// (paged/viz/export/serve.py), the animation export's photographer (animate.py), the browser
// tests and bench/frames.py. Never loaded by a page: the file is one expression, the probes
// by name, and serve.probe(name) hands Playwright the file with `.name` after it. Playwright
// evaluates that to the function and calls it with its argument (or waits on it until it
// returns something truthy); nothing is left behind in the page's globals.
(() => {
  // The frame number the player shows (from the indicator's data-frame), or null: no player.
  function shownFrame() {
    const e = document.querySelector("#pk-frame");
    return e ? Number(e.dataset.frame) : null;
  }

  // The indicator and both arena grids show frame `want`.
  function painted(want) {
    const e = document.querySelector("#pk-frame");
    if (!e || Number(e.dataset.frame) !== want) return false;
    const grids = [...document.querySelectorAll("#pk-player svg[data-pk-frame]")];
    return grids.length === 2 && grids.every((g) => Number(g.dataset.pkFrame) === want);
  }

  // The lesson player has its frames.
  function ready() {
    return !!document.querySelector('#pk-player[data-ready="1"]');
  }

  // No Streamlit script run is in flight.
  function idle() {
    const a = document.querySelector("[data-test-script-state]");
    return !!a && a.dataset.testScriptState === "notRunning";
  }

  // location.search two animation frames on: once the player's pending address write (made in
  // an animation frame) has landed.
  function searchAfterTwoFrames() {
    return new Promise((r) =>
      requestAnimationFrame(() => requestAnimationFrame(() => r(location.search))),
    );
  }

  // The player's next unpacking of frames (its inflate reads a constructed Response; a fetched
  // one has a URL and passes) waits at a gate until releaseUnpacking: a swap held open as long
  // as a test needs, with no timing in it.
  function holdUnpacking() {
    const text = Response.prototype.text;
    const gate = new Promise((open) => {
      window.pkOpenGate = open;
    });
    window.pkGateHeld = false;
    Response.prototype.text = async function () {
      if (this.url !== "") return text.call(this);
      Response.prototype.text = text;
      window.pkGateHeld = true;
      await gate;
      return text.call(this);
    };
  }

  function unpackingHeld() {
    return window.pkGateHeld === true;
  }

  function releaseUnpacking() {
    window.pkOpenGate();
  }

  // The caption on screen: its left and right halves.
  function caption() {
    return [
      document.querySelector("#pk-cap-l").textContent,
      document.querySelector("#pk-cap-r").textContent,
    ];
  }

  // What is on screen only for a while or on a key: a status line (presenter mode's hint) and
  // the help. Photographed, it would differ from run to run with the capture's pace.
  function transients() {
    return [...document.querySelectorAll("#pk-player [role=status], #pk-help")]
      .filter((e) => e.getClientRects().length > 0 && e.textContent.trim() !== "")
      .map((e) => e.id || e.className);
  }

  // Resolves once the fonts are in and the player has re-fitted its rows to presenter mode (a
  // resize observer's callback, then an animation frame): the first frame is then laid out as
  // every later one.
  function settled() {
    return document.fonts.ready.then(
      () =>
        new Promise((done) => {
          let n = 3;
          const tick = () => (--n > 0 ? requestAnimationFrame(tick) : done(true));
          requestAnimationFrame(tick);
        }),
    );
  }

  function goTo(frame) {
    window.pkPlayer.go(frame);
  }

  return {
    shownFrame,
    painted,
    ready,
    idle,
    searchAfterTwoFrames,
    holdUnpacking,
    unpackingHeld,
    releaseUnpacking,
    caption,
    transients,
    settled,
    goTo,
  };
})();
