// `fetch` for a job whose token has egress rules, in a realm with the web's
// Request and Response (a single-use JS child's, or a job's Worker): each
// request goes to the egress proxy outside the child (see egress.mjs), as
// a method, a URL, headers and the whole body, and comes back as a
// Response of this realm. The proxy checks every rule; nothing here is
// trusted, and the program may replace any of it, harming only itself.

// Statuses whose response has no body, whatever the upstream sent.
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/**
 * A `fetch` that sends through `send(meta, body)`, which resolves with
 * `{meta: {status, status_text, url, redirected, headers}, body}`.
 */
export function egressFetch(send) {
  return async function fetch(input, init) {
    const request = new Request(input, init);
    const signal = request.signal;
    signal.throwIfAborted();
    const body = new Uint8Array(await request.arrayBuffer());
    const meta = {
      method: request.method,
      url: request.url,
      headers: [...request.headers],
      redirect: request.redirect,
      integrity: request.integrity,
    };
    const aborted = new Promise((_, reject) => {
      signal.addEventListener("abort", () => reject(signal.reason), { once: true });
    });
    const answer = await Promise.race([send(meta, body), aborted]);
    const got = answer.meta;
    const empty = NULL_BODY.has(got.status) || request.method === "HEAD";
    const response = new Response(empty ? null : answer.body, {
      status: got.status,
      statusText: got.status_text,
      headers: got.headers,
    });
    Object.defineProperty(response, "url", { value: got.url });
    Object.defineProperty(response, "redirected", { value: got.redirected });
    return response;
  };
}

/** A `send` for a Worker: each request goes to the harness over `port` (egress.mjs's `servePort`). */
export function portSender(port) {
  const pending = new Map();
  let nextId = 1;
  port.onmessage = ({ data }) => {
    const waiting = pending.get(data?.id);
    if (!waiting) return;
    pending.delete(data.id);
    if (typeof data.error === "string") waiting.reject(new TypeError(data.error));
    else waiting.resolve({ meta: data.meta, body: data.body });
  };
  return (meta, body) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      port.postMessage({ id, meta, body }, [body.buffer]);
    });
}
