// Client for runbox's HTTP API (see the project's docs/api.md), for Node 18+ and
// Deno: it uses only the global `fetch`.
//
// The rules, as in the Python client:
// - a program that fails is data: `run` resolves to a `Job` whatever its
//   exit code;
// - 429 and 503 are retried after `Retry-After` (at most `maxRetries`
//   times), then thrown as `QuotaExceeded` or `Unavailable`;
// - every other 4xx is thrown at once as a `RunboxError` subclass carrying
//   the server's error code; `TransportError` means runbox was not reached;
// - sessions bend the retry rule where a retry could run something twice
//   (see `createSession` and `execInSession`).

/** The longest long-poll runbox holds a request for, in seconds. */
export const MAX_WAIT_S = 60;
const MAX_RETRY_DELAY_MS = 30_000;
/** How long a session answered as still `starting` (202) is polled for. */
const START_POLL_MS = 120_000;
const FINAL = new Set(["completed", "timeout", "memory_exceeded", "rejected", "cancelled", "worker_lost", "internal_error"]);

export type Language = "python" | "javascript" | "typescript" | "py" | "js" | "ts";

export interface InputFile {
  path: string;
  content: string;
  encoding?: "utf8" | "base64";
}

/** Fields of a job besides its code and language. */
export interface JobOptions {
  stdin?: string;
  args?: string[];
  files?: InputFile[];
  timeout_ms?: number;
  expected_stdout?: string;
  compare?: "exact" | "trim";
  return_files?: boolean | string[];
  callback_url?: string;
}

export interface JobSpec extends JobOptions {
  language: Language;
  code: string;
}

export interface OutputFile {
  path: string;
  content: string;
  size: number;
  truncated: boolean;
}

/** A job as runbox returns it. */
export interface Job {
  id: string;
  status: string;
  language?: string | null;
  stdout?: string | null;
  stderr?: string | null;
  exit_code?: number | null;
  signal?: number | null;
  verdict?: string | null;
  duration_ms?: number | null;
  stdout_truncated?: boolean;
  stderr_truncated?: boolean;
  files?: OutputFile[];
  files_truncated?: boolean;
  /** Ran in one of the token's long-lived children that had already run another of its jobs. */
  warm?: boolean;
  /** CPU time (user + system) runbox measured for the job. */
  cpu_ms?: number | null;
  /** Peak memory runbox measured for the job. */
  peak_memory_bytes?: number | null;
  created_at?: string | null;
  started_at?: string | null;
  finished_at?: string | null;
  timings?: Record<string, number | null>;
}

/** One event of a job's live output (`Client.stream`): a chunk of stdout
 * or stderr whose `data` starts `offset` bytes into the stream, a
 * `restart` (the job runs again from the start on another worker), or the
 * last, `result`, with the finished job. */
export type OutputEvent =
  | { kind: "stdout" | "stderr"; offset: number; data: string }
  | { kind: "restart" }
  | { kind: "result"; job: Job };

/** A saved state of a session; `createSession({ from_checkpoint })` starts
 * a new session from it until `expires_at`. */
export interface Checkpoint {
  id: string;
  created_at: string;
  size_bytes: number;
  took_ms: number;
  expires_at: string;
}

export type SessionLanguage = "python" | "javascript" | "py" | "js";

/** A session as runbox shows it. */
export interface SessionInfo {
  id: string;
  language: "python" | "javascript";
  /** `starting`, `idle`, `busy`, `restoring`, or ended: `closed`, `expired`, `lost`. */
  status: string;
  worker?: string | null;
  created_at: string;
  last_used_at: string;
  idle_timeout_s: number;
  expires_at: string;
  execs: number;
  checkpoints: Checkpoint[];
  ended_reason?: string;
  restored_from?: string;
}

/** One exec in a session: the job (a non-zero exit is data) and the
 * session after it. `restored_from` is set when the session was brought
 * back from that checkpoint during the call: what ran after it is gone. */
export interface SessionExec extends Job {
  session: { id: string; status: string; restored_from?: string };
}

export interface SessionOptions {
  idle_timeout_s?: number;
  /** Start from this checkpoint (its language is the session's). */
  from_checkpoint?: string;
}

export interface ExecOptions {
  stdin?: string;
  timeout_ms?: number;
  /** Written under the session's home before the code runs, as a job's
   * `files`; they stay in the session. */
  files?: InputFile[];
  /** `true` for every file under the home the exec created or changed, or
   * these paths: the result's `files` has them, as a job's does. */
  return_files?: boolean | string[];
}

/** A file uploaded to a session. */
export interface FileWritten {
  path: string;
  size: number;
}

/** One entry of a directory of a session's home. `link` is a symbolic
 * link its code made, never followed; `modified` is RFC 3339. */
export interface FileEntry {
  name: string;
  path: string;
  type: "file" | "directory" | "link";
  size: number;
  modified: string;
}

/** A directory of a session's home (`path` is empty for the home);
 * `truncated` when it held more entries than runbox lists. */
export interface FileListing {
  path: string;
  files: FileEntry[];
  truncated: boolean;
}

/** A file's route: the session's id, and its path percent-encoded name by
 * name. A path with an empty, `.` or `..` name is refused here with the
 * `invalid_path` runbox would answer: the URL would resolve it away before
 * runbox saw it, and name another file. */
function filePath(id: string, path: string): string {
  const names = path.split("/");
  if (names.some((name) => name === "" || name === "." || name === "..")) {
    const message = `${JSON.stringify(path)} has an empty, '.' or '..' name; a path is plain names relative to the session's home`;
    throw new InvalidRequest(400, "invalid_path", message, { error: { code: "invalid_path", message } });
  }
  const encoded = names.map(encodeURIComponent).join("/");
  return `/v1/sessions/${encodeURIComponent(id)}/files/${encoded}`;
}

const SESSION_ENDED = new Set(["closed", "expired", "lost"]);

/** True once the session has ended and will run nothing again. */
export function isEnded(session: SessionInfo): boolean {
  return SESSION_ENDED.has(session.status);
}

/** A batch: counts by status and verdict, and one page of its jobs. */
export interface Batch {
  id: string;
  status: "running" | "finished";
  size: number;
  done: number;
  counts: Record<string, number>;
  verdicts: Record<string, number>;
  offset: number;
  limit: number;
  next_offset: number | null;
  jobs: Job[];
}

/** True once the job will not change again. */
export function isDone(job: Job): boolean {
  return FINAL.has(job.status);
}

/** The JSON spec of one program, for `batch`. */
export function jobSpec(code: string, language: Language = "python", options: JobOptions = {}): JobSpec {
  return { language, code, ...options };
}

/** runbox answered with an error: `status` is HTTP, `code` the error code. */
export class RunboxError extends Error {
  constructor(readonly status: number, readonly code: string, message: string, readonly body: unknown = undefined) {
    super(`${status} ${code}: ${message}`);
    this.name = new.target.name;
  }
}
/** 400, 413, 415 or 422 (`checkpoint_failed`): the request itself is wrong. */
export class InvalidRequest extends RunboxError {}
/** 401: no token, or a wrong one. */
export class Unauthorized extends RunboxError {}
/** 404: no such job, batch, session (`no_session`) or checkpoint
 * (`no_checkpoint`), or another token's. */
export class NotFound extends RunboxError {}
/** 409 `session_busy`: the session is running another exec, taking a
 * checkpoint or still starting. Never retried: the other exec may still be
 * running, and only the caller knows whether to wait or send again. */
export class SessionBusy extends RunboxError {}
/** 410: the session has ended: `session_closed`, `session_expired` or
 * `session_lost`. */
export class SessionEnded extends RunboxError {}
/** 429 after every retry: `quota_exceeded` or `too_many_sessions`. */
export class QuotaExceeded extends RunboxError {}
/** 503 after every retry: `queue_full`, `unavailable` or `session_unavailable`. */
export class Unavailable extends RunboxError {}
/** runbox could not be reached. */
export class TransportError extends Error {
  constructor(message: string, readonly cause?: unknown) {
    super(message);
    this.name = "TransportError";
  }
}

function errorFor(status: number, body: unknown): RunboxError {
  const error = (body as { error?: { code?: string; message?: string } } | null)?.error;
  const code = error?.code ?? "unknown";
  const message = error?.message ?? "";
  const Kind = status === 401
    ? Unauthorized
    : status === 404
    ? NotFound
    : status === 409
    ? SessionBusy
    : status === 410
    ? SessionEnded
    : status === 429
    ? QuotaExceeded
    : status === 503
    ? Unavailable
    : status >= 400 && status < 500
    ? InvalidRequest
    : RunboxError;
  return new Kind(status, code, message, body);
}

export interface ClientOptions {
  /** Default: `RUNBOX_URL`, else http://127.0.0.1:8080. */
  url?: string;
  /** Default: `RUNBOX_TOKEN`. */
  token?: string;
  maxRetries?: number;
  /** Another `fetch`, e.g. for tests or proxies. */
  fetch?: typeof fetch;
}

function env(name: string): string | undefined {
  // deno-lint-ignore no-explicit-any
  const g = globalThis as any;
  try {
    return g.Deno?.env?.get(name) ?? g.process?.env?.[name];
  } catch {
    return undefined; // Deno without --allow-env
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Which 429s and 503s a request may send again, by the server's code. */
type RetryRule = (code: string) => boolean;
const retryAny: RetryRule = () => true;
const retryNever: RetryRule = () => false;
/** A session create (or fork) has no idempotency key, so it is retried only
 * when runbox says no live session was left behind: `too_many_sessions`
 * refuses before anything is made, and after `quota_exceeded`, `queue_full`
 * or `session_unavailable` (its start could not be queued, or no worker
 * opened it) runbox has ended the session it made as lost. `unavailable`
 * (Redis failing midway) may leave a half-made session that a worker opens
 * later, so it is thrown instead. */
const retryCreate: RetryRule = (code) => code !== "unavailable";

async function errorCode(response: Response): Promise<string> {
  try {
    const body = await response.clone().json();
    return body?.error?.code ?? "unknown";
  } catch {
    return "unknown";
  }
}

/** `body` is sent as JSON, `bytes` as they are. */
type RequestInit = {
  body?: unknown;
  bytes?: Uint8Array<ArrayBuffer>;
  headers?: Record<string, string>;
  retry?: RetryRule;
};

export class Client {
  readonly url: string;
  readonly maxRetries: number;
  readonly #token: string;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions = {}) {
    this.url = (options.url ?? env("RUNBOX_URL") ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
    const token = options.token ?? env("RUNBOX_TOKEN");
    if (!token) throw new Error("a token is needed: pass { token } or set RUNBOX_TOKEN");
    this.#token = token;
    this.maxRetries = options.maxRetries ?? 5;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  async #send(method: string, path: string, init: RequestInit = {}) {
    const retry = init.retry ?? retryAny;
    const headers: Record<string, string> = { authorization: `Bearer ${this.#token}`, ...init.headers };
    if (init.body !== undefined) headers["content-type"] = "application/json";
    if (init.bytes !== undefined) headers["content-type"] = "application/octet-stream";
    for (let attempt = 0;; attempt++) {
      let response: Response;
      try {
        response = await this.#fetch(this.url + path, {
          method,
          headers,
          body: init.bytes ?? (init.body === undefined ? undefined : JSON.stringify(init.body)),
        });
      } catch (e) {
        throw new TransportError(`${method} ${path}: ${e}`, e);
      }
      if (
        (response.status === 429 || response.status === 503) && attempt < this.maxRetries &&
        (retry === retryAny || retry(await errorCode(response)))
      ) {
        await response.body?.cancel();
        const asked = Number(response.headers.get("retry-after"));
        const delay = Number.isFinite(asked) && response.headers.has("retry-after")
          ? asked * 1000
          : 250 * 2 ** attempt;
        await sleep(Math.min(Math.max(delay, 0), MAX_RETRY_DELAY_MS));
        continue;
      }
      return response;
    }
  }

  async #request<T>(method: string, path: string, init: RequestInit = {}) {
    const response = await this.#send(method, path, init);
    const text = await response.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = { error: { code: "invalid_response", message: text.slice(0, 200) } };
    }
    if (response.status >= 400) throw errorFor(response.status, body);
    return body as T;
  }

  /** A request whose answer is raw bytes; an error status is thrown as the
   * server's error. */
  async #bytes(method: string, path: string): Promise<Uint8Array> {
    const response = await this.#send(method, path);
    if (response.status >= 400) {
      const text = await response.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch { /* not JSON: kept as text */ }
      throw errorFor(response.status, body);
    }
    return new Uint8Array(await response.arrayBuffer());
  }

  /** A GET whose body is read as a stream; an error status is thrown as
   * the server's error. */
  async #streaming(path: string): Promise<Response> {
    const response = await this.#send("GET", path);
    if (response.status >= 400) {
      const text = await response.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch { /* not JSON: kept as text */ }
      throw errorFor(response.status, body);
    }
    return response;
  }

  /** Queues a job; resolves to its id. */
  async submit(code: string, language: Language = "python", options: JobOptions & { idempotencyKey?: string } = {}) {
    const { idempotencyKey, ...fields } = options;
    const headers: Record<string, string> = idempotencyKey ? { "idempotency-key": idempotencyKey } : {};
    const body = await this.#request<{ id: string }>("POST", "/v1/jobs", { body: jobSpec(code, language, fields), headers });
    return body.id;
  }

  /** The job now, or after up to `wait` seconds if it is not done. */
  get(id: string, wait?: number): Promise<Job> {
    const query = wait ? `?wait=${Math.min(Math.floor(wait), MAX_WAIT_S)}` : "";
    return this.#request<Job>("GET", `/v1/jobs/${encodeURIComponent(id)}${query}`);
  }

  /** Long-polls until the job is done (or `timeoutS` passes). */
  async wait(id: string, timeoutS?: number): Promise<Job> {
    const deadline = timeoutS === undefined ? undefined : Date.now() + timeoutS * 1000;
    for (;;) {
      // At least a second per poll, so the last one is a wait, not a spin.
      const left = deadline === undefined ? MAX_WAIT_S : Math.max(1, Math.min(MAX_WAIT_S, (deadline - Date.now()) / 1000));
      const job = await this.get(id, left);
      if (isDone(job) || (deadline !== undefined && Date.now() >= deadline)) return job;
    }
  }

  /** Runs a program; resolves to the finished job, whatever its exit code. */
  async run(code: string, language: Language = "python", options: JobOptions = {}): Promise<Job> {
    return await this.wait(await this.submit(code, language, options));
  }

  cancel(id: string): Promise<Job> {
    return this.#request<Job>("DELETE", `/v1/jobs/${encodeURIComponent(id)}`);
  }

  /** Queues many jobs as one batch. */
  async batch(
    jobs: JobSpec[],
    options: { shared_runtime?: boolean; stop_on_first_failure?: boolean; callback_url?: string; idempotencyKey?: string } = {},
  ): Promise<BatchHandle> {
    const { idempotencyKey, ...fields } = options;
    const headers: Record<string, string> = idempotencyKey ? { "idempotency-key": idempotencyKey } : {};
    const body = await this.#request<{ id: string; job_ids: string[] }>("POST", "/v1/batches", {
      body: { jobs, ...fields },
      headers,
    });
    return new BatchHandle(this, body.id, body.job_ids);
  }

  getBatch(id: string, options: { wait?: number; offset?: number; limit?: number } = {}): Promise<Batch> {
    const query = new URLSearchParams({ offset: String(options.offset ?? 0), limit: String(options.limit ?? 100) });
    if (options.wait) query.set("wait", String(Math.min(Math.floor(options.wait), MAX_WAIT_S)));
    return this.#request<Batch>("GET", `/v1/batches/${encodeURIComponent(id)}?${query}`);
  }

  cancelBatch(id: string): Promise<Batch> {
    return this.#request<Batch>("DELETE", `/v1/batches/${encodeURIComponent(id)}`);
  }

  /** Each job of the batch as it finishes (NDJSON), until all have. */
  async *streamResults(id: string): AsyncGenerator<Job> {
    const response = await this.#streaming(`/v1/batches/${encodeURIComponent(id)}/results`);
    const decoder = new TextDecoder();
    let pending = "";
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      pending += decoder.decode(chunk, { stream: true });
      let newline;
      while ((newline = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, newline).trim();
        pending = pending.slice(newline + 1);
        if (line) yield JSON.parse(line) as Job;
      }
    }
    if (pending.trim()) yield JSON.parse(pending) as Job;
  }

  /** The job's output as it is written (what came before the call
   * first), then one `result` event with the finished job. */
  async *stream(id: string): AsyncGenerator<OutputEvent> {
    const response = await this.#streaming(`/v1/jobs/${encodeURIComponent(id)}/events`);
    const decoder = new TextDecoder();
    let pending = "";
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      pending += decoder.decode(chunk, { stream: true });
      let end;
      while ((end = pending.indexOf("\n\n")) >= 0) {
        const block = pending.slice(0, end);
        pending = pending.slice(end + 2);
        let kind = "";
        const data: string[] = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) kind = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        // A comment (the keep-alive) has no event name.
        if (!kind) continue;
        const value = JSON.parse(data.join("\n"));
        if (kind === "result") {
          yield { kind, job: value as Job };
          // Leaving the loop cancels the body.
          return;
        }
        if (kind === "stdout" || kind === "stderr") yield { kind, offset: value.offset, data: value.data };
        else if (kind === "restart") yield { kind };
        else if (kind === "error") throw errorFor(503, { error: value });
      }
    }
    throw new TransportError(`GET /v1/jobs/${id}/events: the stream ended before the result`);
  }

  // Sessions: state that lasts across execs (see the project's docs/sessions.md).

  /** Opens a session; resolves once a worker holds it. Retried on 429/503
   * only when runbox says it left no session behind (see `retryCreate`). */
  async createSession(language?: SessionLanguage, options: SessionOptions = {}): Promise<Session> {
    const body = { ...(language === undefined ? {} : { language }), ...options };
    const info = await this.#request<SessionInfo>("POST", "/v1/sessions", { body, retry: retryCreate });
    return new Session(this, await this.#started(info));
  }

  /** Runs `fn` with a new session, and destroys the session after it. */
  async withSession<T>(
    language: SessionLanguage | undefined,
    fn: (session: Session) => Promise<T>,
    options: SessionOptions = {},
  ): Promise<T> {
    const session = await this.createSession(language, options);
    try {
      return await fn(session);
    } finally {
      await session.close();
    }
  }

  /** A handle on an existing session (rejects with `NotFound` if none). */
  async session(id: string): Promise<Session> {
    return new Session(this, await this.getSession(id));
  }

  getSession(id: string): Promise<SessionInfo> {
    return this.#request<SessionInfo>("GET", `/v1/sessions/${encodeURIComponent(id)}`);
  }

  /** This token's sessions, live and recently ended. */
  async listSessions(): Promise<SessionInfo[]> {
    return (await this.#request<{ sessions: SessionInfo[] }>("GET", "/v1/sessions")).sessions;
  }

  /** Runs `code` in the session; a non-zero exit is data. Never retried: an
   * exec is not idempotent, and a 503 may come after the worker ran it;
   * 409 `session_busy` is thrown as `SessionBusy` for the same reason. */
  async execInSession(id: string, code: string, options: ExecOptions = {}): Promise<SessionExec> {
    const path = `/v1/sessions/${encodeURIComponent(id)}/exec`;
    const body = await this.#request<SessionExec | { id: string; status: string }>("POST", path, {
      body: { code, ...options },
      retry: retryNever,
    });
    if ("session" in body) return body;
    // 202: it outlasted runbox's wait; the job has the result later.
    const job = await this.wait(body.id);
    const session = await this.getSession(id);
    return { ...job, session: { id, status: session.status } };
  }

  /** Saves the session's state. A retry after a lost answer at worst
   * leaves one more checkpoint, which expires on its own. */
  checkpointSession(id: string): Promise<Checkpoint> {
    return this.#request<Checkpoint>("POST", `/v1/sessions/${encodeURIComponent(id)}/checkpoints`);
  }

  /** A new session from a checkpoint of this one; retried as a create is. */
  async forkSession(id: string): Promise<Session> {
    const path = `/v1/sessions/${encodeURIComponent(id)}/fork`;
    const info = await this.#request<SessionInfo>("POST", path, { retry: retryCreate });
    return new Session(this, await this.#started(info));
  }

  /** Ends the session and its process; resolves to it, `closed`. */
  destroySession(id: string): Promise<SessionInfo> {
    return this.#request<SessionInfo>("DELETE", `/v1/sessions/${encodeURIComponent(id)}`);
  }

  // A session's files: its home, which is its code's working directory.

  /** Writes `data` (a string as UTF-8) to `path` under the session's home,
   * making its directories; a file there is replaced, so a retry is harmless. */
  async uploadFile(id: string, path: string, data: Uint8Array | string): Promise<FileWritten> {
    // fetch takes any byte view; TypeScript's BodyInit names only views of
    // an ArrayBuffer, which a caller's `Uint8Array` need not say it is.
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data as Uint8Array<ArrayBuffer>;
    return await this.#request<FileWritten>("PUT", filePath(id, path), { bytes });
  }

  /** The bytes of the file at `path` under the session's home. */
  async readFile(id: string, path: string): Promise<Uint8Array> {
    return await this.#bytes("GET", filePath(id, path));
  }

  /** A directory of the session's home (the home itself by default). */
  listFiles(id: string, path?: string): Promise<FileListing> {
    const query = path ? `?${new URLSearchParams({ path })}` : "";
    return this.#request<FileListing>("GET", `/v1/sessions/${encodeURIComponent(id)}/files${query}`);
  }

  /** Deletes the file at `path`, or the directory with all it holds. */
  async deleteFile(id: string, path: string): Promise<void> {
    await this.#bytes("DELETE", filePath(id, path));
  }

  /** `info` once a worker has opened it: runbox answers 202 with the
   * session still `starting` when that takes long. */
  async #started(info: SessionInfo): Promise<SessionInfo> {
    const deadline = Date.now() + START_POLL_MS;
    while (info.status === "starting" && Date.now() < deadline) {
      await sleep(500);
      info = await this.getSession(info.id);
    }
    return info;
  }
}

/** A submitted batch: its id, its jobs' ids, and ways to read it. */
export class BatchHandle {
  constructor(readonly client: Client, readonly id: string, readonly jobIds: string[]) {}

  results(): AsyncGenerator<Job> {
    return this.client.streamResults(this.id);
  }

  /** Waits until every job is done; resolves to the batch with its first page. */
  async wait(): Promise<Batch> {
    for (;;) {
      const batch = await this.client.getBatch(this.id, { wait: MAX_WAIT_S });
      if (batch.status === "finished") return batch;
    }
  }

  cancel(): Promise<Batch> {
    return this.client.cancelBatch(this.id);
  }
}

/** A live session: `exec` runs code in it, keeping what earlier execs
 * defined. `close()` (or `Client.withSession`) destroys it. */
export class Session {
  constructor(readonly client: Client, public info: SessionInfo) {}

  get id(): string {
    return this.info.id;
  }

  get language(): string {
    return this.info.language;
  }

  /** As of the last call that returned the session (see `refresh`). */
  get status(): string {
    return this.info.status;
  }

  async exec(code: string, options: ExecOptions = {}): Promise<SessionExec> {
    const result = await this.client.execInSession(this.id, code, options);
    this.info = { ...this.info, status: result.session.status };
    return result;
  }

  /** See `Client.uploadFile`. */
  uploadFile(path: string, data: Uint8Array | string): Promise<FileWritten> {
    return this.client.uploadFile(this.id, path, data);
  }

  readFile(path: string): Promise<Uint8Array> {
    return this.client.readFile(this.id, path);
  }

  listFiles(path?: string): Promise<FileListing> {
    return this.client.listFiles(this.id, path);
  }

  deleteFile(path: string): Promise<void> {
    return this.client.deleteFile(this.id, path);
  }

  checkpoint(): Promise<Checkpoint> {
    return this.client.checkpointSession(this.id);
  }

  fork(): Promise<Session> {
    return this.client.forkSession(this.id);
  }

  async refresh(): Promise<SessionInfo> {
    return (this.info = await this.client.getSession(this.id));
  }

  async destroy(): Promise<SessionInfo> {
    return (this.info = await this.client.destroySession(this.id));
  }

  /** Destroys the session unless it has already ended. */
  async close(): Promise<void> {
    if (isEnded(this.info)) return;
    try {
      await this.destroy();
    } catch (e) {
      if (!(e instanceof SessionEnded)) throw e; // it ended meanwhile: nothing to do
    }
  }
}
