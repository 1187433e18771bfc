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
