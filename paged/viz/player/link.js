// The address bar follows the player: the lesson, frame, language and presenter mode, so a
// link (or a reload) opens what is on screen. Written once per animation frame, in place
// (history.replaceState: no history entry per key). Methods of the Player (player.js).

const Linking = {
  queueUrl() {
    if (this.urlPending) return;
    this.urlPending = true;
    requestAnimationFrame(() => {
      this.urlPending = false;
      if (this.i < 0) return; // no frame shown yet (it said frame=-1): go() writes it
      // Chromium ignores more than ~200 history updates per 10 s: past 150, update at most
      // every 100 ms (the last frame always lands: a trailing update is scheduled).
      const now = performance.now();
      this.urlTimes = this.urlTimes.filter((t) => now - t < 10000);
      if (this.urlTimes.length > 150 && now - this.urlTimes[this.urlTimes.length - 1] < 100) {
        clearTimeout(this.urlTimer);
        this.urlTimer = setTimeout(() => this.queueUrl(), 100);
        return;
      }
      this.urlTimes.push(now);
      if (this.data.standalone) {
        this.hashUrl();
        return;
      }
      const u = new URL(window.location.href);
      const lang = this.chosenLang();
      if (lang !== "en") u.searchParams.set("lang", lang);
      else u.searchParams.delete("lang");
      if (this.linkFrame === false) {
        // the page cannot reopen these frames from a link: the URL promises none of them
        for (const k of ["lesson", "frame", "present"]) u.searchParams.delete(k);
      } else {
        u.searchParams.set("lesson", this.data.lesson);
        u.searchParams.set("frame", String(this.i));
        if (this.present) u.searchParams.set("present", "1");
        else u.searchParams.delete("present");
      }
      if (u.href !== window.location.href)
        window.history.replaceState(window.history.state, "", u.href);
    });
  },

  // The language last chosen, whose frames may still be unpacking: the link says it already.
  chosenLang() {
    return (this.loading || this.data).lang;
  },

  // A standalone file (paged/viz/export/standalone.py) has no server to keep query params for: the
  // frame, language and presenter mode live in the hash, which a file:// link keeps. A hash
  // without lang opens in the file's first language (``home_lang``: zh for `--lang zh`), so
  // any other language is written out, English included.
  hashUrl() {
    let h = `#frame=${this.i}`;
    const lang = this.chosenLang();
    if (lang !== (this.data.home_lang || "en")) h += `&lang=${lang}`;
    if (this.present) h += "&present=1";
    h += pointHash(this);
    if (window.location.hash !== h) window.history.replaceState(window.history.state, "", h);
  },
};

if (typeof module === "object") module.exports = { Linking };
