// The harness's end of the egress proxy (worker/src/egress): a Unix socket
// the runner listens on, connected once while the harness boots, before
// it drops its permissions, so nothing in the child can connect again.
// A job whose token has egress rules gets a `fetch` that sends each
// request here (egress-fetch.mjs, or python-realm.js's for a Python job);
// every rule is checked by the proxy, outside the child, so nothing here
// needs to be trusted, and nothing a job sends through it gains the job
// more than its own `fetch` would.
//
// The protocol (see link.rs): a line of JSON, then the raw body bytes it
// announces, each way. Each request bears the tag of the job it was made
// for (the frame's `egress_tag`, given to `begin`), taken when the harness
// takes the request: one still queued here when its job has ended is
// refused by the proxy, never taken for the next job's. Between jobs the
// harness takes none.

const encoder = new TextEncoder();
const decoder = new TextDecoder();
// An answer's line (its status, URL and headers); the proxy keeps them under it.
const MAX_LINE = 1024 * 1024;
// A request's line: longer, and the proxy would end the link.
const MAX_REQUEST_LINE = 256 * 1024;

/**
 * Connects to the proxy's socket at `path`, or returns null when the
 * runner gave none. Call while the child may still connect (see above).
 */
export async function connectEgress(path) {
  if (!path) return null;
  const conn = await Deno.connect({ transport: "unix", path });
  // Only a request waiting for its answer keeps the process alive.
  conn.unref();
  return new Egress(conn);
}

class Egress {
  #conn;
  #pending = new Map();
  #nextId = 1;
  /** The tag of the job whose requests are taken now; null between jobs. */
  #job = null;
  #buffer = new Uint8Array(0);
  /** The last write: each waits for the one before, so requests never interleave. */
  #writing = Promise.resolve();

  constructor(conn) {
    this.#conn = conn;
    this.#readLoop().catch(() => this.#failAll("the egress proxy closed the connection"));
  }

  /**
   * Sends one request (`meta`: method, url, headers, redirect; `body`: a
   * Uint8Array) and resolves with `{meta, body}` (status, status_text, url,
   * redirected, headers), or rejects with the proxy's reason.
   */
  send(meta, body) {
    if (this.#job === null) return Promise.reject(new TypeError("runbox egress: the job has ended"));
    const id = this.#nextId++;
    const line = encoder.encode(
      `${JSON.stringify({
        id,
        job: this.#job,
        method: String(meta.method),
        url: String(meta.url),
        headers: meta.headers.map(([name, value]) => [String(name), String(value)]),
        redirect: String(meta.redirect ?? "follow"),
        integrity: String(meta.integrity ?? ""),
        body: body.length,
      })}\n`,
    );
    if (line.length > MAX_REQUEST_LINE) {
      return Promise.reject(new TypeError("runbox egress: the URL and headers are longer than 256 KiB"));
    }
    const answer = new Promise((resolve, reject) => this.#pending.set(id, { resolve, reject }));
    if (this.#pending.size === 1) this.#conn.ref();
    this.#writing = this.#writing
      .then(() => this.#write(line, body))
      .catch(() => this.#settle(id, null, "the egress proxy is gone"));
    return answer;
  }

  /** Takes requests for the job whose frame bears `tag` (none if it has none), until `clear`. */
  begin(tag) {
    this.#job = typeof tag === "string" ? tag : null;
  }

  /** Drops every request still waiting, and takes no more: the job has ended. */
  clear() {
    this.#job = null;
    this.#failAll("the job ended");
  }

  async #write(line, body) {
    const whole = new Uint8Array(line.length + body.length);
    whole.set(line);
    whole.set(body, line.length);
    let at = 0;
    while (at < whole.length) at += await this.#conn.write(whole.subarray(at));
  }

  #settle(id, answer, error) {
    const waiting = this.#pending.get(id);
    if (!waiting) return;
    this.#pending.delete(id);
    if (this.#pending.size === 0) this.#conn.unref();
    if (error === null) waiting.resolve(answer);
    else waiting.reject(new TypeError(error));
  }

  #failAll(reason) {
    for (const id of [...this.#pending.keys()]) this.#settle(id, null, reason);
  }

  async #readLoop() {
    for (;;) {
      const newline = await this.#line();
      const meta = JSON.parse(decoder.decode(this.#buffer.subarray(0, newline)));
      this.#buffer = this.#buffer.subarray(newline + 1);
      // The body is read straight into its own array: it may be megabytes.
      const length = Number(meta.body ?? 0);
      const body = new Uint8Array(length);
      let got = Math.min(length, this.#buffer.length);
      body.set(this.#buffer.subarray(0, got));
      this.#buffer = this.#buffer.subarray(got);
      while (got < length) {
        const n = await this.#conn.read(body.subarray(got));
        if (n === null) throw new Error("closed");
        got += n;
      }
      if (typeof meta.error === "string") this.#settle(meta.id, null, meta.error);
      else this.#settle(meta.id, { meta, body }, null);
    }
  }

  /** Reads until the buffer holds a whole line, and returns where it ends. */
  async #line() {
    for (;;) {
      const at = this.#buffer.indexOf(0x0a);
      if (at !== -1) return at;
      if (this.#buffer.length > MAX_LINE) throw new Error("line too long");
      const chunk = new Uint8Array(64 * 1024);
      const n = await this.#conn.read(chunk);
      if (n === null) throw new Error("closed");
      const joined = new Uint8Array(this.#buffer.length + n);
      joined.set(this.#buffer);
      joined.set(chunk.subarray(0, n), this.#buffer.length);
      this.#buffer = joined;
    }
  }
}

/**
 * Serves a job Worker's `fetch` (egress-fetch.mjs's `portSender`) through
 * `egress`: each message on `port` is one request, answered on it by id.
 * What arrives is the job's, read as plain data.
 */
export function servePort(port, egress) {
  port.onmessage = ({ data }) => {
    const id = data?.id;
    let meta;
    let body;
    try {
      meta = {
        method: String(data.meta.method),
        url: String(data.meta.url),
        headers: Array.from(data.meta.headers, ([name, value]) => [String(name), String(value)]),
        redirect: String(data.meta.redirect ?? "follow"),
        integrity: String(data.meta.integrity ?? ""),
      };
      body = data.body instanceof Uint8Array ? data.body : new Uint8Array(0);
    } catch {
      port.postMessage({ id, error: "runbox egress: a malformed request" });
      return;
    }
    egress.send(meta, body).then(
      (answer) => port.postMessage({ id, meta: answer.meta, body: answer.body }, [answer.body.buffer]),
      (error) => port.postMessage({ id, error: String(error?.message ?? error) }),
    );
  };
}
