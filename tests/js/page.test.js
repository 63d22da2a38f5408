// The player's files share one module on a page (payload.py SCRIPTS, then the one-file
// export's start): together they must parse as one, with no name declared twice.
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { spawnSync } = require("node:child_process");

const PLAYER = path.join(__dirname, "../../paged/viz/player");
const START = path.join(__dirname, "../../paged/viz/export/standalone.js");

function check(source) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pk-page-"));
  const file = path.join(dir, "page.mjs");
  fs.writeFileSync(file, source);
  try {
    return spawnSync(process.execPath, ["--check", file], { encoding: "utf8" });
  } finally {
    fs.rmSync(dir, { recursive: true });
  }
}

test("the player's files and the export's start parse as one module", () => {
  const files = fs
    .readdirSync(PLAYER)
    .filter((f) => f.endsWith(".js") && f !== "address.js") // address.js: a component of its own
    .map((f) => fs.readFileSync(path.join(PLAYER, f), "utf8"));
  const got = check([...files, fs.readFileSync(START, "utf8")].join("\n"));
  assert.equal(got.status, 0, got.stderr);
});

test("a name declared in two files is caught", () => {
  const got = check("const SPEEDS = [1];\nconst SPEEDS = [2];\n");
  assert.notEqual(got.status, 0);
  assert.match(got.stderr, /already been declared/);
});
