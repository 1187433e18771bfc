//! The [`Client`], its settings, and the one path every request takes:
//! the bearer token, the timeout, and the retry rule.
//!
//! A 429 or 503 is retried after its `Retry-After` (capped, and with a
//! default when the header is missing), up to [`Retry::max_retries`]
//! times, unless the call says a retry could do something twice (a
//! session exec is never retried; a session create is not retried on
//! `unavailable`). Any other error status is an [`Error::Api`] at once.
//!
//! There is no timeout on the whole client: each request gets
//! [`ClientBuilder::timeout`] plus however long runbox may hold it (a
//! long-poll's wait, an exec's run), and a stream gets none, only an idle
//! limit ([`crate::STREAM_IDLE`]) where the server sends keep-alives.

use std::fmt;
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, api_error};

/// The longest long-poll runbox holds a request for, in seconds.
pub const MAX_WAIT_S: u64 = 60;

/// How 429 and 503 answers are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Retries after the first attempt; 0 never retries.
    pub max_retries: u32,
    /// The longest pause between attempts, whatever `Retry-After` asks.
    pub max_delay: Duration,
    /// The pause when the answer has no `Retry-After` in seconds.
    pub default_delay: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry { max_retries: 5, max_delay: Duration::from_secs(30), default_delay: Duration::from_secs(1) }
    }
}

/// A client of one runbox service, for one token. Cheap to clone: clones
/// share one connection pool.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: String,
    retry: Retry,
    timeout: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("retry", &self.retry)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Settings for a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    url: String,
    token: String,
    retry: Retry,
    timeout: Duration,
    connect_timeout: Duration,
}

impl ClientBuilder {
    /// How 429 and 503 are retried ([`Retry::default`]: 5 times, at most 30 s apart).
    pub fn retry(mut self, retry: Retry) -> ClientBuilder {
        self.retry = retry;
        self
    }

    /// Shorthand for a [`Retry`] with this many retries.
    pub fn max_retries(mut self, retries: u32) -> ClientBuilder {
        self.retry.max_retries = retries;
        self
    }

    /// How long a request may take beyond what runbox may hold it for
    /// (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    /// How long connecting may take (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.connect_timeout = timeout;
        self
    }

    pub fn build(self) -> Result<Client, Error> {
        let base = Url::parse(&self.url)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && !url.cannot_be_a_base())
            .ok_or_else(|| Error::Url(self.url.clone()))?;
        let http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .build()
            .map_err(|source| Error::Transport { what: "building the HTTP client".to_owned(), source })?;
        Ok(Client { http, base, token: self.token, retry: self.retry, timeout: self.timeout })
    }
}

impl Client {
    /// A client of the service at `url` (e.g. `http://127.0.0.1:8080`) for
    /// `token`, with the default settings.
    pub fn new(url: &str, token: &str) -> Result<Client, Error> {
        Client::builder(url, token).build()
    }

    pub fn builder(url: &str, token: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            token: token.to_owned(),
            retry: Retry::default(),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
        }
    }

    /// Sends `call`, retrying 429 and 503 as its rule allows; an error
    /// status becomes [`Error::Api`].
    pub(crate) async fn send(&self, call: &Call<'_>) -> Result<(reqwest::Response, String), Error> {
        let url = self.url(call);
        let what = format!("{} {url}", call.method);
        let mut attempt = 0;
        loop {
            let mut request = self.http.request(call.method.clone(), url.clone()).bearer_auth(&self.token);
            if let Some(body) = &call.body {
                request = request.header(CONTENT_TYPE, call.content_type).body(body.clone());
            }
            if let Some(key) = call.idempotency_key {
                request = request.header("idempotency-key", key);
            }
            if let Some(accept) = call.accept {
                request = request.header(ACCEPT, accept);
            }
            if let Some(hold) = call.hold {
                request = request.timeout(self.timeout + hold);
            }
            let response = request.send().await.map_err(|source| Error::Transport { what: what.clone(), source })?;
            let status = response.status();
            if !status.is_client_error() && !status.is_server_error() {
                return Ok((response, what));
            }
            let delay = retry_after(response.headers());
            let body = response.bytes().await.map_err(|source| Error::Transport { what: what.clone(), source })?;
            let error = api_error(status, &body);
            let busy = status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE;
            if busy && attempt < self.retry.max_retries && call.retry.allows(error.code().unwrap_or_default()) {
                tokio::time::sleep(delay.unwrap_or(self.retry.default_delay).min(self.retry.max_delay)).await;
                attempt += 1;
                continue;
            }
            return Err(error);
        }
    }

    /// Sends `call` and reads its answer with `decode`, which is given the
    /// status (some routes answer 200 or 202 with different bodies).
    pub(crate) async fn answer<T>(
        &self,
        call: &Call<'_>,
        decode: impl FnOnce(StatusCode, &[u8]) -> serde_json::Result<T>,
    ) -> Result<T, Error> {
        let (response, what) = self.send(call).await?;
        let status = response.status();
        let body = response.bytes().await.map_err(|source| Error::Transport { what: what.clone(), source })?;
        decode(status, &body).map_err(|source| Error::Decode { what, source })
    }

    /// Sends `call` and reads its body as bytes.
    pub(crate) async fn bytes(&self, call: &Call<'_>) -> Result<Vec<u8>, Error> {
        let (response, what) = self.send(call).await?;
        let body = response.bytes().await.map_err(|source| Error::Transport { what, source })?;
        Ok(body.to_vec())
    }

    /// Sends `call` and reads its body as `T`.
    pub(crate) async fn json<T: DeserializeOwned>(&self, call: &Call<'_>) -> Result<T, Error> {
        self.answer(call, |_, body| serde_json::from_slice(body)).await
    }

    /// The URL of `call`: the base URL's path, then the call's segments,
    /// each percent-encoded, so an id can never change the route.
    pub(crate) fn url(&self, call: &Call<'_>) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(&call.path);
        }
        if !call.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&call.query);
        }
        url
    }
}

/// Which 429 and 503 answers a call may retry, by their error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryRule {
    /// Any: nothing was done, or doing it again is harmless.
    Any,
    /// None: the request may have done its work before the error (a
    /// session exec changes the session).
    Never,
    /// All but `unavailable`, after which Redis may hold a half-made
    /// session that a worker opens later; the other codes say runbox made
    /// nothing, or ended what it made.
    SessionCreate,
}

impl RetryRule {
    fn allows(self, code: &str) -> bool {
        match self {
            RetryRule::Any => true,
            RetryRule::Never => false,
            RetryRule::SessionCreate => code != "unavailable",
        }
    }
}

/// One request to make.
pub(crate) struct Call<'a> {
    method: Method,
    path: Vec<&'a str>,
    query: Vec<(&'static str, String)>,
    body: Option<Vec<u8>>,
    content_type: &'static str,
    idempotency_key: Option<&'a str>,
    accept: Option<&'static str>,
    /// How long runbox may hold the request before it answers; None for a
    /// stream, which has no timeout of its own.
    hold: Option<Duration>,
    retry: RetryRule,
}

impl<'a> Call<'a> {
    pub fn new(method: Method, path: &[&'a str]) -> Call<'a> {
        Call {
            method,
            path: path.to_vec(),
            query: Vec::new(),
            body: None,
            content_type: "application/json",
            idempotency_key: None,
            accept: None,
            hold: Some(Duration::ZERO),
            retry: RetryRule::Any,
        }
    }

    pub fn get(path: &[&'a str]) -> Call<'a> {
        Call::new(Method::GET, path)
    }

    pub fn post(path: &[&'a str]) -> Call<'a> {
        Call::new(Method::POST, path)
    }

    pub fn put(path: &[&'a str]) -> Call<'a> {
        Call::new(Method::PUT, path)
    }

    pub fn delete(path: &[&'a str]) -> Call<'a> {
        Call::new(Method::DELETE, path)
    }

    /// A raw body, sent as `application/octet-stream`.
    pub fn bytes(mut self, body: Vec<u8>) -> Call<'a> {
        self.body = Some(body);
        self.content_type = "application/octet-stream";
        self
    }

    /// A JSON body, encoded once for every attempt.
    pub fn body(mut self, body: &impl Serialize) -> Result<Call<'a>, Error> {
        let encoded = serde_json::to_vec(body).map_err(|source| Error::Decode {
            what: format!("encoding the body of {} /{}", self.method, self.path.join("/")),
            source,
        })?;
        self.body = Some(encoded);
        Ok(self)
    }

    pub fn query(mut self, name: &'static str, value: Option<impl ToString>) -> Call<'a> {
        if let Some(value) = value {
            self.query.push((name, value.to_string()));
        }
        self
    }

    /// `?wait=S` (capped at [`MAX_WAIT_S`]), and the time runbox may hold
    /// the request for it.
    pub fn wait(self, seconds: Option<u64>) -> Call<'a> {
        let seconds = seconds.map(|s| s.min(MAX_WAIT_S));
        self.query("wait", seconds).hold(Duration::from_secs(seconds.unwrap_or(0)))
    }

    pub fn idempotency_key(mut self, key: Option<&'a str>) -> Call<'a> {
        self.idempotency_key = key;
        self
    }

    pub fn hold(mut self, hold: Duration) -> Call<'a> {
        self.hold = Some(hold);
        self
    }

    /// A streamed answer of `content_type`: no whole-request timeout.
    pub fn stream(mut self, content_type: &'static str) -> Call<'a> {
        self.accept = Some(content_type);
        self.hold = None;
        self
    }

    pub fn retry(mut self, rule: RetryRule) -> Call<'a> {
        self.retry = rule;
        self
    }
}

/// A `Retry-After` in seconds (whole or not); None when absent or a date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: f64 = headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn retry_after_is_seconds_or_nothing() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        for (value, seconds) in
            [("1", Some(1.0)), (" 2.5 ", Some(2.5)), ("-1", None), ("Wed, 21 Oct 2015 07:28:00 GMT", None)]
        {
            headers.insert(RETRY_AFTER, HeaderValue::from_static(value));
            assert_eq!(retry_after(&headers), seconds.map(Duration::from_secs_f64), "{value}");
        }
    }

    #[test]
    fn ids_cannot_change_the_route() {
        let client = Client::new("http://127.0.0.1:8080/prefix/", "t").expect("client");
        let url = client.url(&Call::get(&["v1", "jobs", "../batches?x=1"]).wait(Some(600)));
        assert_eq!(url.as_str(), "http://127.0.0.1:8080/prefix/v1/jobs/..%2Fbatches%3Fx=1?wait=60");
        assert!(matches!(Client::new("not a url", "t"), Err(Error::Url(_))));
        assert!(matches!(Client::new("mailto:a@b", "t"), Err(Error::Url(_))));
    }

    #[test]
    fn session_creates_are_not_retried_on_unavailable() {
        assert!(RetryRule::SessionCreate.allows("queue_full"));
        assert!(!RetryRule::SessionCreate.allows("unavailable"));
        assert!(!RetryRule::Never.allows("queue_full"));
    }
}
