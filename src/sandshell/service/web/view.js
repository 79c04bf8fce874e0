// sandshell's web view: the task list and a task's live page. No dependencies.
// Every text from the model or the sandbox is put in the page with textContent or a text node,
// never as HTML; the event stream is asked for with view=inert, so control characters arrive
// already shown as text (^[, \x07), exactly as the terminal UI shows them.
"use strict";

const $ = (id) => document.getElementById(id);
const MAX_TERM_CHARS = 400000; // the page keeps the last part of a long transcript
const HEALTH_EVERY_MS = 5000;
const RETRY_MS = [1000, 2000, 5000, 10000]; // a refused stream is asked for again after these waits

// Text the API gives as it is (a goal) shown as the inert view shows the model's: controls and the
// bidirectional marks that reorder what a reader sees become visible escapes (U+202E would make
// "evil" read "live"); newlines and tabs stay.
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]/g;
function visible(text) {
  return String(text).replace(UNSAFE, (c) => {
    const code = c.charCodeAt(0);
    if (code === 0x1b) return "^[";
    return code < 0x100 ? "\\x" + code.toString(16).padStart(2, "0") : "\\u" + code.toString(16).padStart(4, "0");
  });
}
function plural(n, word) { return `${n} ${word}${n === 1 ? "" : "s"}`; }
function numbers(t) {
  return `${plural(t.turns, "turn")} · ${t.seconds.toFixed(1)}s · tokens in ${t.tokens_in}, out ${t.tokens_out}`;
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function say(text) { $("message").textContent = text; }

async function api(path, options) {
  const r = await fetch(path, Object.assign({ credentials: "same-origin" }, options || {}));
  if (r.status === 401) {
    say("Not signed in: open the address the server printed when it started (it ends in ?token=...).");
    throw new Error("401");
  }
  if (!r.ok) {
    let detail = r.statusText;
    try { detail = (await r.json()).detail || detail; } catch (e) { /* not JSON */ }
    say(String(detail));
    throw new Error(String(r.status));
  }
  return r.json();
}

async function health() {
  try {
    const h = await (await fetch("/v1/health", { credentials: "same-origin" })).json();
    const signedIn = typeof h.backend === "string";
    $("signout").hidden = !signedIn;
    $("health").textContent = signedIn ? `${visible(h.backend)} · ${h.running} running · ${h.queued} waiting`
                                       : "not signed in";
  } catch (e) { $("health").textContent = "server not answering"; }
}

async function signOut() {
  await fetch("/signout", { method: "POST", credentials: "same-origin" });
  location.href = "/";
}

// -- the list --------------------------------------------------------------------------------
async function showList() {
  $("list-view").hidden = false;
  $("new-task").addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = { goal: $("goal").value, max_steps: Number($("steps").value), timeout: Number($("timeout").value) };
    const t = await api("/v1/tasks", { method: "POST", headers: { "Content-Type": "application/json" },
                                        body: JSON.stringify(body) });
    location.href = "/tasks/" + encodeURIComponent(t.id);
  });
  const refresh = async () => {
    const page = await api("/v1/tasks?limit=100");
    const rows = page.tasks.map((t) => {
      const tr = el("tr");
      const link = el("a", "", t.id);
      link.href = "/tasks/" + encodeURIComponent(t.id);
      const first = el("td", "mono"); first.appendChild(link); tr.appendChild(first);
      tr.appendChild(el("td", "status s-" + t.status, t.status));
      tr.appendChild(el("td", "goal", visible(t.goal.slice(0, 160))));
      tr.appendChild(el("td", "", String(t.turns)));
      tr.appendChild(el("td", "", t.seconds.toFixed(1)));
      tr.appendChild(el("td", "", `${t.tokens_in} / ${t.tokens_out}`));
      tr.appendChild(el("td", "goal", visible((t.result || t.error || "").slice(0, 200))));
      return tr;
    });
    $("tasks").replaceChildren(...rows);
  };
  await refresh();
  setInterval(() => refresh().catch(() => {}), 3000);
}

// -- one task ----------------------------------------------------------------------------------
const term = () => $("term");
let lastKind = "";
let ended = false; // the recording's end was seen: the stream knows better than a status asked a moment ago

function put(text, cls) {
  const t = term();
  const follow = t.scrollTop + t.clientHeight >= t.scrollHeight - 30;
  if (cls === "model" && lastKind === "model" && t.lastChild) {
    t.lastChild.appendChild(document.createTextNode(text)); // tokens join the span they belong to
  } else {
    t.appendChild(el("span", cls, text));
  }
  lastKind = cls;
  while (t.textContent.length > MAX_TERM_CHARS && t.firstChild) t.removeChild(t.firstChild);
  if (follow) t.scrollTop = t.scrollHeight;
}

function summary(a) {
  if (a.kind === "write") return `[write] ${a.arg} (${a.content.length} characters)`;
  return `[${a.kind}] ${a.arg}`;
}

const handlers = {
  SessionStarted: (e) => put(`sandshell session ${e.session_id} · ${e.model} · ${e.profile}\n`, "note"),
  TurnStarted: (e) => {
    put(`── turn ${e.turn} · prompt ${e.prompt_tokens}/${e.n_ctx} tokens ──\n`, "turn");
    phase.prompt = e.prompt_tokens;
  },
  ModelText: (e) => {
    put(e.text, "model");
    if (phase.name === "thinking") { phase.generated += 1; showPhase(); }
  },
  Phase: (e) => {
    if (e.name !== phase.name) { phase.name = e.name; phase.since = Date.now(); phase.generated = 0; }
    showPhase();
  },
  ModelReplied: (e) => put(e.error ? `\n[answer not valid: ${e.error}]\n` : "\n", e.error ? "warn" : "model"),
  ActionStarted: (e) => {
    const a = e.action;
    phase.action = a.kind === "bash" ? a.arg : summary(a);
    if (a.comment) put(`# ${a.comment}\n`, "note");
    if (a.kind === "bash") { put(`${e.prompt}${e.by_user ? " (you)" : ""} `, "prompt"); put(a.arg + "\n", ""); }
    else put(summary(a) + "\n", "act");
  },
  OutputChunk: (e) => put(e.data, e.stream === "stderr" ? "stderr" : ""),
  ActionFinished: (e) => {
    const r = e.result;
    if (r) {
      if (r.output && !r.output.endsWith("\n")) put("\n", "");
      if (!e.ok || r.restarted || r.notice) put(`[${e.summary}]\n`, "warn");
    } else put(`  → ${e.summary}\n`, e.ok ? "note" : "warn");
  },
  Notice: (e) => put(`[${e.level}] ${e.text}\n`, e.level === "error" ? "err" : e.level === "warning" ? "warn" : "note"),
  ApprovalNeeded: (e) => put(`[waiting for approval] ${summary(e.action)}\n`, "act"),
  StateRead: (e) => {
    for (const [key, text] of [["goal", e.goal], ["system", e.system], ["config", e.config]]) {
      $(key + "-text").textContent = text;
      $("h-" + key).classList.toggle("changed", e.changed.includes(key));
    }
  },
  ConfigChanged: (e) => {
    const line = `${JSON.stringify(e.before)} → ${JSON.stringify(e.after)}\n`;
    $("config-changes").appendChild(document.createTextNode(line));
    put("[config] " + line, "act");
  },
  SessionEnded: (e) => {
    const box = $("result");
    box.hidden = false;
    box.replaceChildren(
      el("div", "status s-" + e.status, `${e.status} · ${numbers(e)}`),
      el("pre", "", e.result || ""), el("div", "err", e.error || ""));
    ended = true;
    phase.name = "done";
    showPhase();
    $("task-status").textContent = e.status;
    $("task-status").className = "status s-" + e.status;
    $("cancel").hidden = true;
  },
};

// What the session is doing, said at once and counted up, so a slow machine never looks frozen:
// the prompt being evaluated (no token yet), tokens being generated, a command running.
const phase = { name: "", since: Date.now(), prompt: 0, generated: 0, action: "" };
function showPhase() {
  const secs = Math.floor((Date.now() - phase.since) / 1000);
  let text = "";
  if (phase.name === "thinking" && phase.generated === 0) text = `evaluating the prompt (${phase.prompt} tokens) · ${secs}s`;
  else if (phase.name === "thinking") text = `generating · ${phase.generated} pieces of text · ${secs}s`;
  else if (phase.name === "running") text = `running ${phase.action.split("\n")[0].slice(0, 120)} · ${secs}s`;
  else if (phase.name === "paused") text = `paused · ${secs}s`;
  else if (phase.name === "approval") text = "waiting for approval";
  $("phase").textContent = ended || phase.name === "done" ? "" : text;
  $("phase").dataset.phase = phase.name;
}

async function showTask(id) {
  $("task-view").hidden = false;
  $("task-id").textContent = id;
  let lastId = 0; // the last event seen: a new stream resumes after it
  let stream = null;
  let retries = 0;
  let settled = false; // the API says the task is over: its word on how it ended is final
  const info = async () => {
    const t = await api("/v1/tasks/" + encodeURIComponent(id));
    $("task-goal").textContent = visible(t.goal);
    $("task-numbers").textContent = numbers(t);
    const over = !["queued", "running"].includes(t.status);
    settled = over;
    if (ended && !over) return t; // the stream saw the end before the record was written: it knows better
    $("task-status").textContent = t.status + (t.queue_position ? ` (#${t.queue_position} in the queue)` : "");
    $("task-status").className = "status s-" + t.status;
    $("cancel").hidden = over;
    return t;
  };
  $("cancel").addEventListener("click", async () => {
    await api(`/v1/tasks/${encodeURIComponent(id)}/cancel`, { method: "POST" });
    await info();
  });
  const reconnecting = (why) => { $("connection").textContent = why; };
  const open = () => {
    // After a refused stream, the next one says where it was with ?after= (an EventSource sends
    // Last-Event-ID only on its own reconnections).
    stream = new EventSource(`/v1/tasks/${encodeURIComponent(id)}/events?view=inert` + (lastId ? `&after=${lastId}` : ""));
    stream.onopen = () => { retries = 0; reconnecting(""); };
    for (const [type, handle] of Object.entries(handlers)) {
      stream.addEventListener(type, (m) => {
        const seq = Number(m.lastEventId);
        if (seq && seq <= lastId) return; // seen already (a resumed stream starts after it)
        if (seq) lastId = seq;
        handle(JSON.parse(m.data));
        if (type === "SessionEnded") { stream.close(); reconnecting(""); info().catch(() => {}); }
      });
    }
    stream.onerror = async () => { // a pause to resume from, the end of the recording, or the server gone
      const t = await info().catch(() => null);
      if (t && !["queued", "running"].includes(t.status)) { // over: nothing more will come
        stream.close();
        reconnecting("");
        phase.name = "done";
        showPhase();
        return;
      }
      if (stream.readyState === EventSource.CLOSED) { // refused (a restart, a full server): ask again
        const wait = RETRY_MS[Math.min(retries, RETRY_MS.length - 1)];
        retries += 1;
        reconnecting(`reconnecting to the server (attempt ${retries}, in ${wait / 1000}s)…`);
        setTimeout(open, wait);
      } else {
        reconnecting(t ? "reconnecting to the event stream…" : "the server is not answering; reconnecting…");
      }
    };
  };
  await info().catch(() => null);
  open();
  setInterval(() => { if (!settled) info().catch(() => {}); }, 2000);
  setInterval(showPhase, 1000);
}

$("signout").addEventListener("click", () => signOut().catch(() => {}));
health();
setInterval(health, HEALTH_EVERY_MS);
const match = location.pathname.match(/^\/tasks\/([^/]+)$/);
(match ? showTask(decodeURIComponent(match[1])) : showList()).catch(() => {});
