// `fetch` and the few web classes it needs, for a Python job's bare realm
// (python-realm.js) whose token has egress rules: what `pyodide.http.pyfetch`
// and `js.fetch` use. Evaluated in the job's realm before its program
// starts, only for such a job; the realm calls the function with its
// global and a `send(meta, body)` that reaches the egress proxy through
// the harness (see egress.mjs). Like everything in the realm, nothing here
// is trusted: the proxy, outside the child, checks every request.
(function installFetch(realm, send) {
  "use strict";
  const NULL_BODY = new Set([101, 103, 204, 205, 304]);
  const utf8 = new realm.TextEncoder();
  const text = new realm.TextDecoder();

  const bytesOf = (body) => {
    if (body === undefined || body === null) return new Uint8Array(0);
    if (typeof body === "string") return utf8.encode(body);
    if (body instanceof ArrayBuffer) return new Uint8Array(body.slice(0));
    if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength));
    return utf8.encode(String(body));
  };

  class Headers {
    #list = [];
    constructor(init) {
      if (init instanceof Headers) init = init.entries();
      else if (init && typeof init === "object" && !(Symbol.iterator in init)) init = Object.entries(init);
      for (const [name, value] of init ?? []) this.append(name, value);
    }
    append(name, value) {
      this.#list.push([String(name).toLowerCase(), String(value)]);
    }
    set(name, value) {
      this.delete(name);
      this.append(name, value);
    }
    delete(name) {
      const key = String(name).toLowerCase();
      this.#list = this.#list.filter(([n]) => n !== key);
    }
    get(name) {
      const key = String(name).toLowerCase();
      const values = this.#list.filter(([n]) => n === key).map(([, v]) => v);
      return values.length ? values.join(", ") : null;
    }
    has(name) {
      return this.get(name) !== null;
    }
    *entries() {
      const names = [...new Set(this.#list.map(([n]) => n))].sort();
      for (const name of names) yield [name, this.get(name)];
    }
    *keys() {
      for (const [name] of this.entries()) yield name;
    }
    *values() {
      for (const [, value] of this.entries()) yield value;
    }
    forEach(callback, self) {
      for (const [name, value] of this.entries()) callback.call(self, value, name, this);
    }
    [Symbol.iterator]() {
      return this.entries();
    }
  }

  class AbortSignal {
    aborted = false;
    reason = undefined;
    #listeners = [];
    addEventListener(type, listener) {
      if (type === "abort") this.#listeners.push(listener);
    }
    removeEventListener(type, listener) {
      this.#listeners = this.#listeners.filter((l) => l !== listener);
    }
    throwIfAborted() {
      if (this.aborted) throw this.reason;
    }
    _abort(reason) {
      if (this.aborted) return;
      this.aborted = true;
      this.reason = reason ?? new Error("AbortError: the request was aborted");
      for (const listener of this.#listeners) {
        try {
          listener({ type: "abort", target: this });
        } catch {
          // A listener's error is its own.
        }
      }
    }
    static abort(reason) {
      const signal = new AbortSignal();
      signal._abort(reason);
      return signal;
    }
    static any(signals) {
      const joined = new AbortSignal();
      for (const signal of signals) {
        if (signal.aborted) joined._abort(signal.reason);
        else signal.addEventListener("abort", () => joined._abort(signal.reason));
      }
      return joined;
    }
  }

  class AbortController {
    signal = new AbortSignal();
    abort(reason) {
      this.signal._abort(reason);
    }
  }

  class Body {
    #bytes;
    bodyUsed = false;
    constructor(bytes) {
      this.#bytes = bytes;
    }
    #take() {
      if (this.bodyUsed) return Promise.reject(new TypeError("the body was already read"));
      this.bodyUsed = true;
      return Promise.resolve(this.#bytes ?? new Uint8Array(0));
    }
    _peek() {
      return this.#bytes;
    }
    async arrayBuffer() {
      const bytes = await this.#take();
      return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
    }
    async bytes() {
      return new Uint8Array(await this.arrayBuffer());
    }
    async text() {
      return text.decode(await this.#take());
    }
    async json() {
      return JSON.parse(await this.text());
    }
  }

  class Request extends Body {
    constructor(input, init = {}) {
      const from = input instanceof Request ? input : null;
      init = init ?? {};
      const body = init.body !== undefined ? bytesOf(init.body) : (from?._peek() ?? null);
      super(body);
      this.url = from ? from.url : String(input);
      this.method = String(init.method ?? from?.method ?? "GET").toUpperCase();
      this.headers = new Headers(init.headers ?? from?.headers);
      if (typeof init.body === "string" && !this.headers.has("content-type")) {
        this.headers.set("content-type", "text/plain;charset=UTF-8");
      }
      this.redirect = String(init.redirect ?? from?.redirect ?? "follow");
      this.integrity = String(init.integrity ?? from?.integrity ?? "");
      this.signal = init.signal ?? from?.signal ?? new AbortSignal();
    }
    clone() {
      return new Request(this);
    }
  }

  class Response extends Body {
    constructor(body, init = {}) {
      super(body === null || body === undefined ? null : bytesOf(body));
      this.status = Number(init.status ?? 200);
      this.statusText = String(init.statusText ?? "");
      this.headers = new Headers(init.headers);
      this.ok = this.status >= 200 && this.status < 300;
      this.url = String(init.url ?? "");
      this.redirected = init.redirected === true;
      this.type = "basic";
    }
    clone() {
      if (this.bodyUsed) throw new TypeError("the body was already read");
      const bytes = this._peek();
      return new Response(bytes ? bytes.slice() : null, this);
    }
  }

  async function fetch(input, init) {
    const request = new Request(input, init);
    request.signal.throwIfAborted();
    const body = new Uint8Array(await request.arrayBuffer());
    const meta = {
      method: request.method,
      url: request.url,
      headers: [...request.headers],
      redirect: request.redirect,
      integrity: request.integrity,
    };
    const aborted = new Promise((_, reject) => {
      request.signal.addEventListener("abort", () => reject(request.signal.reason));
    });
    const answer = await Promise.race([send(meta, body), aborted]);
    const got = answer.meta;
    const empty = NULL_BODY.has(got.status) || request.method === "HEAD";
    return new Response(empty ? null : answer.body, {
      status: got.status,
      statusText: got.status_text,
      headers: got.headers,
      url: got.url,
      redirected: got.redirected,
    });
  }

  Object.assign(realm, { fetch, Headers, Request, Response, AbortController, AbortSignal });
});
