"use strict";
// The page's code. It calls only this origin's API, with the token the
// person typed, which lives in `token` below and nowhere else (no storage,
// no cookie, no URL). Live output is read with fetch, because EventSource
// cannot send an Authorization header, and its Server-Sent Events are
// parsed here. Everything shown from the API is set as text, never as HTML.
(() => {
  const $ = (id) => document.getElementById(id);
  const SAMPLES = {
    python: 'import time\n\nfor i in range(3):\n    print("tick", i, flush=True)\n    time.sleep(0.5)\nprint("done")\n',
    javascript:
      'for (let i = 0; i < 3; i++) {\n  console.log("tick", i);\n  await new Promise((resolve) => setTimeout(resolve, 500));\n}\nconsole.log("done");\n',
    typescript: 'const greet = (name: string): string => `hello, ${name}`;\nconsole.log(greet("runbox"));\n',
  };
  const REFRESH_MS = 5000;
  const RECENT_MAX = 20;

  let token = "";
  /** This tab's jobs, newest first: {id, language, status, at}. */
  const recent = [];
  /** The job being run and followed: {id, controller}. */
  let current = null;
  let refreshTimer = null;
  /** Counts refreshes, so that only the latest one shows what it read. */
  let refreshes = 0;

  /** An error the API answered with, or a failure to reach it. */
  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  function request(method, path, body, signal) {
    const headers = {};
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    return fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
      credentials: "omit",
    }).catch((e) => {
      if (e.name === "AbortError") throw e;
      throw new ApiError(0, "network", `the API could not be reached (${e.message})`);
    });
  }

  /** The API's `{"error": {"code", "message"}}` of a failed response. */
  async function failure(response) {
    const text = await response.text().catch(() => "");
    try {
      const { error } = JSON.parse(text);
      if (error && error.code) return new ApiError(response.status, error.code, error.message || "");
    } catch {
      // Not the API's JSON: said below as it came.
    }
    return new ApiError(response.status, `http_${response.status}`, text.slice(0, 200) || response.statusText);
  }

  async function call(method, path, body, read = (r) => r.json()) {
    const response = await request(method, path, body);
    if (!response.ok) throw await failure(response);
    return read(response);
  }

  function showError(element, e) {
    element.replaceChildren();
    const code = document.createElement("strong");
    code.textContent = e instanceof ApiError ? e.code : "error";
    const status = e instanceof ApiError && e.status ? ` (HTTP ${e.status})` : "";
    element.append(code, `${status}: ${e.message}`);
    element.hidden = false;
  }

  function hideError(element) {
    element.hidden = true;
    element.replaceChildren();
  }

  // ---- The code editor ----

  const code = $("code");
  const language = $("language");
  code.value = SAMPLES[language.value];
  let sampled = language.value;
  language.addEventListener("change", () => {
    // An untouched sample follows the language; the person's code stays.
    if (code.value === SAMPLES[sampled]) code.value = SAMPLES[language.value];
    sampled = language.value;
  });

  let escaped = false;
  code.addEventListener("keydown", (e) => {
    const plain = !e.shiftKey && !e.ctrlKey && !e.altKey && !e.metaKey;
    if (e.key === "Tab" && plain && !escaped) {
      e.preventDefault();
      // insertText keeps the browser's undo history; setRangeText is the fallback.
      if (!document.execCommand("insertText", false, "    ")) {
        code.setRangeText("    ", code.selectionStart, code.selectionEnd, "end");
      }
    } else if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      run();
    }
    escaped = e.key === "Escape";
  });

  // ---- Running a job ----

  const runButton = $("run");
  const cancelButton = $("cancel");
  const state = $("state");
  const errorBox = $("error");
  const stdout = $("stdout");
  const stderr = $("stderr");
  const result = $("result");

  function clearOutput() {
    hideError(errorBox);
    stdout.textContent = "";
    stderr.textContent = "";
    result.replaceChildren();
  }

  function append(pre, text) {
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.append(text);
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  }

  function setRunning(running) {
    runButton.disabled = running;
    cancelButton.disabled = !running;
    for (const button of $("jobs").querySelectorAll("button")) button.disabled = running;
  }

  async function run() {
    if (current) return;
    clearOutput();
    const spec = { language: language.value, code: code.value };
    if ($("stdin").value) spec.stdin = $("stdin").value;
    if ($("expected").value) spec.expected_stdout = $("expected").value;
    state.textContent = "Submitting…";
    let accepted;
    try {
      accepted = await call("POST", "/v1/jobs", spec);
    } catch (e) {
      showError(errorBox, e);
      state.textContent = "Not run.";
      return;
    }
    const id = accepted.id;
    remember({ id, language: spec.language, status: accepted.status, at: new Date() });
    current = { id, controller: new AbortController() };
    setRunning(true);
    state.textContent = `Job ${id}: ${accepted.status}…`;
    try {
      const job = await follow(id, current.controller.signal);
      // Without a result event (the stream broke off), the job object says.
      showJob(job ?? (await call("GET", `/v1/jobs/${encodeURIComponent(id)}`)));
    } catch (e) {
      showError(errorBox, e);
      state.textContent = `Job ${id}: could not be followed.`;
    } finally {
      current = null;
      setRunning(false);
    }
  }

  cancelButton.addEventListener("click", async () => {
    if (!current) return;
    try {
      // The stream then ends with the cancelled job's result.
      await call("DELETE", `/v1/jobs/${encodeURIComponent(current.id)}`);
    } catch (e) {
      showError(errorBox, e);
    }
  });
  runButton.addEventListener("click", run);

  /**
   * Streams job `id`'s events into the output panes; answers the job object
   * of its `result` event, or null if the stream ended without one.
   */
  async function follow(id, signal) {
    const response = await request("GET", `/v1/jobs/${encodeURIComponent(id)}/events`, undefined, signal);
    if (!response.ok) throw await failure(response);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return null;
        buffer += value;
        // A CR at the end may be the first half of a CRLF.
        const keep = buffer.endsWith("\r") ? 1 : 0;
        const text = buffer.slice(0, buffer.length - keep).replace(/\r\n?/g, "\n");
        const blocks = text.split("\n\n");
        buffer = blocks.pop() + buffer.slice(buffer.length - keep);
        for (const block of blocks) {
          const event = parseEvent(block);
          if (!event) continue;
          const job = onEvent(id, event);
          if (job) return job;
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  /** One SSE event block: {name, data}, or null for comments alone. */
  function parseEvent(block) {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
    }
    return data.length ? { name, data: data.join("\n") } : null;
  }

  function onEvent(id, { name, data }) {
    const body = JSON.parse(data);
    if (name === "stdout" || name === "stderr") {
      append(name === "stdout" ? stdout : stderr, body.data);
      state.textContent = `Job ${id}: running…`;
    } else if (name === "restart") {
      // Another worker took the job over: its output starts again.
      stdout.textContent = "";
      stderr.textContent = "";
      state.textContent = `Job ${id}: restarted on another worker…`;
    } else if (name === "result") {
      return body;
    } else if (name === "error") {
      showError(errorBox, new ApiError(0, body.error || "error", body.message || ""));
    }
    return null;
  }

  const MiB = 1024 * 1024;
  const FIELDS = [
    ["Status", (j) => j.status],
    ["Verdict", (j) => j.verdict],
    ["Exit code", (j) => j.exit_code],
    ["Signal", (j) => j.signal],
    ["Duration", (j) => (j.duration_ms == null ? null : `${j.duration_ms} ms`)],
    ["CPU", (j) => (j.cpu_ms == null ? null : `${j.cpu_ms} ms`)],
    ["Peak memory", (j) => (j.peak_memory_bytes == null ? null : `${(j.peak_memory_bytes / MiB).toFixed(1)} MiB`)],
    ["Truncated", (j) => [j.stdout_truncated && "stdout", j.stderr_truncated && "stderr"].filter(Boolean).join(", ") || null],
    ["Job", (j) => j.id],
  ];

  /** Shows a job object: its output as the job holds it, and its figures. */
  function showJob(job) {
    stdout.textContent = job.stdout ?? "";
    stderr.textContent = job.stderr ?? "";
    const rows = [];
    for (const [label, value] of FIELDS) {
      const v = value(job);
      if (v !== null && v !== undefined && v !== "") rows.push([label, String(v), label.toLowerCase().replace(/ /g, "_")]);
    }
    describe(result, rows, "field");
    state.textContent = `Job ${job.id}: ${job.status}${job.verdict ? ` (${job.verdict})` : ""}`;
    remember({ id: job.id, status: job.status });
  }

  // ---- Recent jobs ----

  function remember(update) {
    let entry = recent.find((j) => j.id === update.id);
    if (!entry) {
      entry = { language: "", at: new Date() };
      recent.unshift(entry);
      recent.length = Math.min(recent.length, RECENT_MAX);
    }
    Object.assign(entry, update);
    renderRecent();
  }

  function renderRecent() {
    const list = $("jobs");
    list.replaceChildren();
    for (const job of recent) {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.disabled = current !== null;
      button.dataset.id = job.id;
      button.textContent = `${job.at.toLocaleTimeString()}  ${job.language}  ${job.status}  ${job.id.slice(0, 8)}`;
      button.setAttribute("aria-label", `${job.language} job ${job.id}, ${job.status}, at ${job.at.toLocaleTimeString()}`);
      button.addEventListener("click", () => open(job.id));
      item.append(button);
      list.append(item);
    }
  }

  async function open(id) {
    if (current) return;
    clearOutput();
    state.textContent = `Reading job ${id}…`;
    try {
      showJob(await call("GET", `/v1/jobs/${encodeURIComponent(id)}`));
    } catch (e) {
      showError(errorBox, e);
      state.textContent = `Job ${id}: could not be read.`;
    }
  }

  // ---- Queue and workers ----

  const serviceState = $("service-state");
  const serviceError = $("service-error");

  /** The unlabelled samples of Prometheus text, by name. */
  function samples(text) {
    const found = {};
    for (const line of text.split("\n")) {
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*) (\S+)$/.exec(line.trim());
      if (match) found[match[1]] = Number(match[2]);
    }
    return found;
  }

  /** Fills `dl` with the [label, value] pairs; each value's dd is tagged `data-<key>=<tag>`. */
  function describe(dl, pairs, key) {
    dl.replaceChildren();
    for (const [label, value, tag] of pairs) {
      const dt = document.createElement("dt");
      dt.textContent = label;
      const dd = document.createElement("dd");
      dd.textContent = value;
      if (tag) dd.dataset[key] = tag;
      dl.append(dt, dd);
    }
  }

  function workerItem(w) {
    const item = document.createElement("li");
    const name = document.createElement("h3");
    name.textContent = w.name;
    const dl = document.createElement("dl");
    describe(dl, [
      ["Slots", `${w.concurrency} (${w.sessions ?? 0} held by sessions)`],
      ["Memory cap", `${w.memory_mb} MiB per job`],
      ["Runtimes", `Deno ${w.deno ?? "?"}, Pyodide ${w.pyodide ?? "?"}`],
      ["Isolation", w.isolation.length ? w.isolation.join(", ") : "Deno's permissions only"],
    ]);
    item.append(name, dl);
    return item;
  }

  async function refresh() {
    clearTimeout(refreshTimer);
    refreshTimer = null;
    const mine = ++refreshes;
    if (!token) {
      serviceState.textContent = "Set a token to see them.";
      hideError(serviceError);
      $("queue").replaceChildren();
      $("workers").replaceChildren();
      return;
    }
    try {
      const [metrics, runtimes] = await Promise.all([
        call("GET", "/metrics", undefined, (r) => r.text()),
        call("GET", "/v1/runtimes"),
      ]);
      if (mine !== refreshes) return;
      const m = samples(metrics);
      const gauge = (name, unit = "") => (name in m ? `${m[name]}${unit}` : "—");
      describe(
        $("queue"),
        [
          ["Queued or running", gauge("runbox_api_queue_depth"), "runbox_api_queue_depth"],
          ["Oldest waiting", gauge("runbox_api_oldest_queued_age_seconds", " s"), "runbox_api_oldest_queued_age_seconds"],
          ["Live workers", gauge("runbox_api_workers"), "runbox_api_workers"],
        ],
        "metric",
      );
      $("workers").replaceChildren(...runtimes.workers.map(workerItem));
      serviceState.textContent = `Updated ${new Date().toLocaleTimeString()}; refreshed every ${REFRESH_MS / 1000} s.`;
      hideError(serviceError);
    } catch (e) {
      if (mine !== refreshes) return;
      showError(serviceError, e);
      serviceState.textContent = "Could not read the queue and workers.";
    }
    // The token may have been cleared while the calls were out.
    if (token) refreshTimer = setTimeout(refresh, REFRESH_MS);
  }

  const tokenInput = $("token");
  let tokenTimer = null;
  tokenInput.addEventListener("input", () => {
    token = tokenInput.value.trim();
    clearTimeout(tokenTimer);
    tokenTimer = setTimeout(refresh, 300);
  });
  // A browser may fill the field back in on reload; the page starts with none.
  tokenInput.value = "";
})();
