// sandshell's web view: the task list and a task's live page. No dependencies.
// Every text from the model or the sandbox is put in the page with textContent or a text node,
// never as HTML; the event stream is asked for with view=inert, so control characters arrive
// already shown as text (^[, \x07), exactly as the terminal UI shows them.
"use strict";

const $ = (id) => document.getElementById(id);
const MAX_TERM_CHARS = 400000; // the page keeps the last part of a long transcript

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
    const h = await (await fetch("/v1/health")).json();
    $("health").textContent = `${h.backend} · ${h.running} running · ${h.queued} waiting`;
  } catch (e) { $("health").textContent = "server not answering"; }
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
      tr.appendChild(el("td", "", t.goal.slice(0, 160)));
      tr.appendChild(el("td", "", String(t.turns)));
      tr.appendChild(el("td", "", t.seconds.toFixed(1)));
      tr.appendChild(el("td", "", (t.result || t.error || "").slice(0, 200)));
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
  TurnStarted: (e) => put(`── turn ${e.turn} · prompt ${e.prompt_tokens}/${e.n_ctx} tokens ──\n`, "turn"),
  ModelText: (e) => put(e.text, "model"),
  ModelReplied: (e) => put(e.error ? `\n[answer not valid: ${e.error}]\n` : "\n", e.error ? "warn" : "model"),
  ActionStarted: (e) => {
    const a = e.action;
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
      el("div", "status s-" + e.status, `${e.status} · ${e.turns} turns · ${e.seconds.toFixed(1)}s · ` +
                                         `tokens in ${e.tokens_in}, out ${e.tokens_out}`),
      el("pre", "", e.result || ""), el("div", "err", e.error || ""));
    ended = true;
    $("task-status").textContent = e.status;
    $("task-status").className = "status s-" + e.status;
    $("cancel").hidden = true;
  },
};

async function showTask(id) {
  $("task-view").hidden = false;
  $("task-id").textContent = id;
  const info = async () => {
    const t = await api("/v1/tasks/" + encodeURIComponent(id));
    $("task-meta").textContent = `goal: ${t.goal}`;
    if (ended) return t;
    $("task-status").textContent = t.status + (t.queue_position ? ` (#${t.queue_position} in the queue)` : "");
    $("task-status").className = "status s-" + t.status;
    $("cancel").hidden = !["queued", "running"].includes(t.status);
    return t;
  };
  $("cancel").addEventListener("click", async () => {
    await api(`/v1/tasks/${encodeURIComponent(id)}/cancel`, { method: "POST" });
    await info();
  });
  await info();
  const stream = new EventSource(`/v1/tasks/${encodeURIComponent(id)}/events?view=inert`);
  for (const [type, handle] of Object.entries(handlers)) {
    stream.addEventListener(type, (m) => {
      handle(JSON.parse(m.data));
      if (type === "SessionEnded") { stream.close(); info().catch(() => {}); }
    });
  }
  stream.onerror = async () => { // the server closed the stream: over, or a pause to resume from
    const t = await info().catch(() => null);
    if (!t || !["queued", "running"].includes(t.status)) stream.close();
  };
  setInterval(() => { if (!$("cancel").hidden) info().catch(() => {}); }, 3000);
}

health();
const match = location.pathname.match(/^\/tasks\/([^/]+)$/);
(match ? showTask(decodeURIComponent(match[1])) : showList()).catch(() => {});
