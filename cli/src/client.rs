//! The few HTTP calls the command line makes, with the retry rule every
//! runbox client follows: 429 and 503 wait for `Retry-After` and try again.

use std::time::Duration;

use anyhow::{Context, anyhow};
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// Retries of a 429 or 503 before giving up.
const MAX_RETRIES: u32 = 5;
/// The longest long-poll runbox holds a request for.
pub const MAX_WAIT_S: u64 = 60;

/// The longest a live-output stream is read: past any job's time limit.
const EVENTS_TIMEOUT: Duration = Duration::from_secs(3600);

/// One Server-Sent Event of `GET /v1/jobs/{id}/events`.
pub struct Event {
    pub name: String,
    pub data: Value,
}

/// A job's event stream, read one event at a time.
pub struct Events {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Events {
    /// The next event, or None when the stream ended.
    pub async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let block = String::from_utf8_lossy(&block);
                let (mut name, mut data) = (String::new(), String::new());
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("event:") {
                        name = value.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.strip_prefix(' ').unwrap_or(value));
                    }
                }
                // A comment (the keep-alive) has no event name.
                if !name.is_empty() {
                    let data = serde_json::from_str(&data).context("an event's data is not JSON")?;
                    return Ok(Some(Event { name, data }));
                }
                continue;
            }
            match self.response.chunk().await? {
                Some(bytes) => self.buffer.extend_from_slice(&bytes),
                None => return Ok(None),
            }
        }
    }
}

pub struct Client {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Client {
    pub fn new(url: &str, token: &str) -> anyhow::Result<Client> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(MAX_WAIT_S + 30)).build()?;
        Ok(Client { http, url: url.trim_end_matches('/').to_owned(), token: token.to_owned() })
    }

    /// Sends a request, retrying 429 and 503; an error status becomes an
    /// error naming the server's code and message.
    pub async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<reqwest::Response> {
        for attempt in 0.. {
            let mut request = self.http.request(method.clone(), format!("{}{path}", self.url)).bearer_auth(&self.token);
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request.send().await.with_context(|| format!("{method} {}{path}", self.url))?;
            let status = response.status();
            if (status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE)
                && attempt < MAX_RETRIES
            {
                let seconds = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(1);
                tokio::time::sleep(Duration::from_secs(seconds.min(30))).await;
                continue;
            }
            if status.is_client_error() || status.is_server_error() {
                let body: Value = response.json().await.unwrap_or(Value::Null);
                let code = body["error"]["code"].as_str().unwrap_or("unknown");
                let message = body["error"]["message"].as_str().unwrap_or("");
                return Err(anyhow!("runbox answered {status}: {code}: {message}"));
            }
            return Ok(response);
        }
        unreachable!("the loop returns")
    }

    pub async fn json(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        Ok(self.send(method, path, body).await?.json().await?)
    }

    /// Job `id`'s live output, as Server-Sent Events ([`Events`]).
    pub async fn events(&self, id: &str) -> anyhow::Result<Events> {
        let url = format!("{}/v1/jobs/{id}/events", self.url);
        // The stream lasts as long as the job: no whole-request timeout.
        let request = self.http.get(&url).bearer_auth(&self.token).timeout(EVENTS_TIMEOUT);
        let response = request.send().await.with_context(|| format!("GET {url}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(anyhow!("runbox answered {status} to GET {url}"));
        }
        Ok(Events { response, buffer: Vec::new() })
    }

    /// Long-polls until job `id` is final.
    pub async fn wait(&self, id: &str) -> anyhow::Result<Value> {
        loop {
            let job = self.json(Method::GET, &format!("/v1/jobs/{id}?wait={MAX_WAIT_S}"), None).await?;
            if !matches!(job["status"].as_str(), Some("queued" | "running")) {
                return Ok(job);
            }
        }
    }
}
