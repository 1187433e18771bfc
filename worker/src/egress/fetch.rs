//! One request of a job, from the rule check to the last byte of its answer.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use runbox_common::{Egress, HostTraffic, Secret, addresses};
use serde::{Deserialize, Serialize};

use super::EgressLimits;

/// Redirects followed for one request, as browsers allow.
const MAX_REDIRECTS: u32 = 20;

/// Request headers the job's `fetch` may not set: the proxy owns the
/// connection, its framing and its encoding (bodies are passed on as they
/// came, so none is asked for).
const DROPPED_REQUEST_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "accept-encoding",
];

/// Response headers not passed on: they describe the proxy's connection.
const DROPPED_RESPONSE_HEADERS: &[&str] = &["connection", "keep-alive", "transfer-encoding", "content-length"];

/// What a job asked for, as its harness sent it.
#[derive(Debug, Deserialize)]
pub(super) struct Request {
    pub method: String,
    pub url: String,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    #[serde(default)]
    pub redirect: Redirect,
    /// Subresource integrity (`sha256-<base64>`, as Pyodide asks for its
    /// packages): the body must hash to it. Empty: none.
    #[serde(default)]
    pub integrity: String,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Redirect {
    #[default]
    Follow,
    Manual,
    Error,
}

/// What the job's `fetch` resolves with; the body follows it raw.
#[derive(Debug, Serialize)]
pub(super) struct Response {
    pub status: u16,
    pub status_text: String,
    pub url: String,
    pub redirected: bool,
    pub headers: Vec<(String, String)>,
}

/// The job a link serves now: its rules, and its token's secrets.
pub(super) struct JobEgress {
    /// The job frame's `egress_tag`, which its harness stamps on every
    /// request it makes for the job (see `link.rs`).
    pub tag: String,
    pub egress: Egress,
    pub secrets: Arc<TokenSecrets>,
    pub usage: Mutex<Usage>,
    pub limits: EgressLimits,
    pub span: tracing::Span,
}

/// What a job has used of the proxy, per host.
#[derive(Debug, Default)]
pub(super) struct Usage {
    pub requests: u32,
    pub in_flight: u32,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub hosts: Vec<HostTraffic>,
}

impl JobEgress {
    fn usage(&self) -> std::sync::MutexGuard<'_, Usage> {
        self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn host(usage: &mut Usage, host: &str) -> usize {
        match usage.hosts.iter().position(|h| h.host == host) {
            Some(at) => at,
            None => {
                usage.hosts.push(HostTraffic { host: host.to_owned(), ..HostTraffic::default() });
                usage.hosts.len() - 1
            }
        }
    }

    /// Counts one more request to `host`, within the job's cap.
    fn admit(&self, host: &str) -> Result<(), String> {
        let mut usage = self.usage();
        if usage.requests >= self.limits.max_requests {
            return Err(format!("this job has made its {} requests", self.limits.max_requests));
        }
        usage.requests += 1;
        let at = Self::host(&mut usage, host);
        usage.hosts[at].requests += 1;
        Ok(())
    }

    /// Counts `bytes` sent to (`out`) or received from `host`, within the cap.
    fn spend(&self, host: &str, bytes: u64, out: bool) -> Result<(), String> {
        let mut usage = self.usage();
        let total = if out { &mut usage.bytes_out } else { &mut usage.bytes_in };
        if *total + bytes > self.limits.max_bytes {
            let way = if out { "sent" } else { "received" };
            return Err(format!("this job has {way} its {} bytes", self.limits.max_bytes));
        }
        *total += bytes;
        let at = Self::host(&mut usage, host);
        if out {
            usage.hosts[at].bytes_out += bytes;
        } else {
            usage.hosts[at].bytes_in += bytes;
        }
        Ok(())
    }

    /// Takes one of the job's concurrent requests; [`JobEgress::release`] gives it back.
    pub fn enter(&self) -> Result<(), String> {
        let mut usage = self.usage();
        if usage.in_flight >= self.limits.max_connections {
            return Err(format!("this job has {} requests open already", self.limits.max_connections));
        }
        usage.in_flight += 1;
        Ok(())
    }

    pub fn release(&self) {
        let mut usage = self.usage();
        usage.in_flight = usage.in_flight.saturating_sub(1);
    }
}

/// Runs `request` for `job` (see the module header of `egress`), and logs
/// it: the method, the host and port, and the status and bytes or why it
/// was refused; never a path, query, header or body, which may be secret.
pub(super) async fn fetch(
    client: &reqwest::Client,
    job: &JobEgress,
    request: Request,
    body: Vec<u8>,
) -> Result<(Response, Vec<u8>), String> {
    let method = request.method.clone();
    let host = Url::parse(&request.url)
        .ok()
        .and_then(|url| Some(format!("{}:{}", url.host_str()?, url.port_or_known_default()?)));
    let host = host.unwrap_or_else(|| "(no host)".to_owned());
    let integrity = request.integrity.clone();
    // Everything the job gets back is scrubbed of every secret of its
    // token, whichever request carried it: an upstream may echo a value,
    // store it and hand it back later, or redirect to a URL holding it.
    let result = match run(client, job, request, body).await {
        Ok((mut answer, bytes, carried)) => {
            answer.url = job.scrub_text(&answer.url);
            for (_, value) in &mut answer.headers {
                *value = job.scrub_text(value);
            }
            let bytes = job.scrub(bytes);
            // Checked on what the job gets, and never with a secret aboard:
            // a hash of an echo would let a job test guesses of the value.
            if carried && !integrity.is_empty() {
                Err("a request that carries a secret cannot ask for integrity".to_owned())
            } else {
                check_integrity(&integrity, &bytes).map(|()| (answer, bytes))
            }
        }
        Err(why) => Err(job.scrub_text(&why)),
    };
    let token = &job.egress.token;
    match &result {
        Ok((answer, bytes)) => {
            tracing::info!(%token, %method, %host, status = answer.status, bytes_in = bytes.len(), "egress request")
        }
        Err(why) => tracing::info!(%token, %method, %host, refused = %why, "egress request refused"),
    }
    result
}

/// The request and its redirects; the answer, unscrubbed, and whether a
/// secret went out with it.
async fn run(
    client: &reqwest::Client,
    job: &JobEgress,
    request: Request,
    body: Vec<u8>,
) -> Result<(Response, Vec<u8>, bool), String> {
    // No error names the URL: it goes to the log, which keeps hosts only.
    let mut url = Url::parse(&request.url).map_err(|e| format!("the URL does not parse: {e}"))?;
    let mut method = reqwest::Method::from_bytes(request.method.as_bytes())
        .map_err(|_| format!("{:?} is not an HTTP method", request.method))?;
    let mut headers: Vec<(String, String)> = request
        .headers
        .into_iter()
        .filter(|(name, _)| !DROPPED_REQUEST_HEADERS.contains(&name.to_ascii_lowercase().as_str()))
        .collect();
    let mut body = Some(body);
    let mut redirected = false;
    let mut carried = false;
    for hop in 0..=MAX_REDIRECTS {
        let (host, port) = destination(&url)?;
        let key = format!("{}:{port}", url.host_str().unwrap_or(&host));
        if !job.egress.allows(&host, port) {
            return Err(if hop == 0 {
                format!("{key} is not in this token's egress rules")
            } else {
                format!("a redirect to {key} left this token's egress rules")
            });
        }
        job.admit(&key)?;
        let (sent, used) = with_secrets(&headers, job, url.scheme(), &host, port);
        carried |= used;
        let mut builder = client.request(method.clone(), url.clone());
        let mut out = method.as_str().len() + url.as_str().len() + 12;
        for (name, value) in &sent {
            out += name.len() + value.len() + 4;
            builder = builder.header(name.as_str(), value.as_str());
        }
        if let Some(bytes) = &body {
            out += bytes.len();
            builder = builder.body(bytes.clone());
        }
        job.spend(&key, out as u64, true)?;
        let response = builder.send().await.map_err(describe)?;
        let header_bytes: usize = response.headers().iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
        job.spend(&key, header_bytes as u64 + 16, false)?;
        let status = response.status();
        let location = response.headers().get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok());
        if let Some(location) = location.filter(|_| status.is_redirection() && request.redirect != Redirect::Manual) {
            if request.redirect == Redirect::Error {
                return Err(format!("{key} answered a redirect, and the request said redirect: \"error\""));
            }
            let next = url.join(location).map_err(|e| format!("a redirect to a bad URL: {e}"))?;
            let code = status.as_u16();
            if code == 303 || ((code == 301 || code == 302) && method == reqwest::Method::POST) {
                if method != reqwest::Method::HEAD {
                    method = reqwest::Method::GET;
                }
                body = None;
                headers.retain(|(name, _)| !name.to_ascii_lowercase().starts_with("content-"));
            }
            if next.origin() != url.origin() {
                headers.retain(|(name, _)| !matches!(name.to_ascii_lowercase().as_str(), "authorization" | "cookie"));
            }
            url = next;
            redirected = true;
            continue;
        }
        let answer = Response {
            status: status.as_u16(),
            status_text: status.canonical_reason().unwrap_or("").to_owned(),
            url: url.to_string(),
            redirected,
            headers: response
                .headers()
                .iter()
                .filter(|(name, _)| !DROPPED_RESPONSE_HEADERS.contains(&name.as_str()))
                .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
                .collect(),
        };
        let mut response = response;
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(describe)? {
            job.spend(&key, chunk.len() as u64, false)?;
            bytes.extend_from_slice(&chunk);
        }
        return Ok((answer, bytes, carried));
    }
    Err(format!("more than {MAX_REDIRECTS} redirects"))
}

/// Checks `bytes` against subresource integrity metadata: each of its
/// space-separated hashes this proxy knows (SHA-256, -384, -512) must match.
fn check_integrity(integrity: &str, bytes: &[u8]) -> Result<(), String> {
    use base64::Engine;
    use sha2::Digest;
    for expected in integrity.split_whitespace() {
        let (algorithm, value) = expected.split_once('-').unwrap_or((expected, ""));
        let value = value.split('?').next().unwrap_or_default();
        let actual = match algorithm {
            "sha256" => sha2::Sha256::digest(bytes).to_vec(),
            "sha384" => sha2::Sha384::digest(bytes).to_vec(),
            "sha512" => sha2::Sha512::digest(bytes).to_vec(),
            _ => return Err(format!("integrity {expected:?}: an unknown hash")),
        };
        if base64::engine::general_purpose::STANDARD.encode(actual) != value {
            return Err(format!("the response does not match its integrity {expected:?}"));
        }
    }
    Ok(())
}

/// The host (an IP address without brackets) and port a URL goes to.
fn destination(url: &Url) -> Result<(String, u16), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{}: only http and https go through the proxy", url.scheme()));
    }
    let host = match url.host() {
        Some(url::Host::Domain(name)) => name.to_owned(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        None => return Err("the URL names no host".to_owned()),
    };
    let port = url.port_or_known_default().ok_or_else(|| "the URL names no port".to_owned())?;
    Ok((host, port))
}

/// `headers` with each placeholder of a secret bound to `host:port`
/// replaced by its value, and whether any was. Only over https: TLS is
/// what makes the host the one the rule names, and keeps the value off
/// the wire; over plain http the placeholder goes out as it is.
fn with_secrets(
    headers: &[(String, String)],
    job: &JobEgress,
    scheme: &str,
    host: &str,
    port: u16,
) -> (Vec<(String, String)>, bool) {
    let bound: Vec<_> = job.secrets.placed.iter().filter(|(_, secret)| secret.host.allows(host, port)).collect();
    if scheme != "https" || bound.is_empty() {
        return (headers.to_vec(), false);
    }
    let mut used = false;
    let sent = headers
        .iter()
        .map(|(name, value)| {
            let mut value = value.clone();
            for (placeholder, secret) in &bound {
                if value.contains(placeholder.as_str()) {
                    value = value.replace(placeholder.as_str(), &secret.value);
                    used = true;
                }
            }
            (name.clone(), value)
        })
        .collect();
    (sent, used)
}

/// One token's secrets, as its jobs' requests use them: made once per
/// token when the proxy starts, shared by each of its jobs.
#[derive(Debug, Default)]
pub(super) struct TokenSecrets {
    /// Each secret's placeholder and the secret.
    placed: Vec<(String, Secret)>,
    /// Every form of every secret to scrub from answers (see [`scrub_forms`]).
    scrub_forms: Vec<(Vec<u8>, Vec<u8>)>,
}

impl TokenSecrets {
    /// `named`, a token's secrets by name, placed and ready to scrub.
    pub fn new<'a>(named: impl IntoIterator<Item = (&'a String, &'a Secret)>) -> TokenSecrets {
        let placed: Vec<(String, Secret)> =
            named.into_iter().map(|(name, secret)| (Secret::placeholder(name), secret.clone())).collect();
        TokenSecrets { scrub_forms: scrub_forms(&placed), placed }
    }
}

/// What the job must never get back, and what it gets instead: each of its
/// token's secrets as it is, JSON-escaped, percent-encoded and in base64,
/// each to be replaced by the secret's placeholder. (A reflection in
/// another encoding, or cut in pieces, is not caught: bind a secret only to
/// a host that does not echo what it is sent.)
fn scrub_forms(secrets: &[(String, Secret)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    use base64::Engine;
    let mut forms = Vec::new();
    for (placeholder, secret) in secrets {
        let value = secret.value.as_str();
        let json = serde_json::to_string(value).unwrap_or_default();
        let encodings = [
            value.to_owned(),
            json.trim_matches('"').to_owned(),
            url::form_urlencoded::byte_serialize(value.as_bytes()).collect::<String>(),
            base64::engine::general_purpose::STANDARD.encode(value),
        ];
        for form in encodings {
            if !form.is_empty() && !forms.iter().any(|(seen, _): &(Vec<u8>, Vec<u8>)| *seen == form.as_bytes()) {
                forms.push((form.into_bytes(), placeholder.clone().into_bytes()));
            }
        }
    }
    // The longest first, so that a form containing another is replaced whole.
    forms.sort_by_key(|(form, _)| std::cmp::Reverse(form.len()));
    forms
}

impl JobEgress {
    /// `bytes` with every form of every secret replaced (see [`scrub_forms`]).
    fn scrub(&self, bytes: Vec<u8>) -> Vec<u8> {
        let mut bytes = bytes;
        for (form, placeholder) in &self.secrets.scrub_forms {
            if !bytes.windows(form.len()).any(|window| window == form.as_slice()) {
                continue;
            }
            let mut out = Vec::with_capacity(bytes.len());
            let mut at = 0;
            while at < bytes.len() {
                if bytes[at..].starts_with(form) {
                    out.extend_from_slice(placeholder);
                    at += form.len();
                } else {
                    out.push(bytes[at]);
                    at += 1;
                }
            }
            bytes = out;
        }
        bytes
    }

    fn scrub_text(&self, text: &str) -> String {
        String::from_utf8_lossy(&self.scrub(text.as_bytes().to_vec())).into_owned()
    }
}

/// An error and its causes, on one line: reqwest's own message says only
/// which request failed. Without the URL: the job knows it, and the log
/// line this becomes names only the host.
fn describe(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Resolves a name for the proxy's client, and refuses it unless every
/// address it resolves to is public: the client then connects only to
/// those addresses, so what was checked is what is reached.
pub(super) struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            if addrs.is_empty() {
                return Err(format!("{name} resolves to no address").into());
            }
            if let Some((ip, why)) = addrs.iter().find_map(|a| addresses::refusal(a.ip()).map(|why| (a.ip(), why))) {
                return Err(refused(&name, ip, why).into());
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

fn refused(name: &str, ip: IpAddr, why: &str) -> String {
    format!("refused: {name} resolves to {ip}, a {why} address; only an IP address written in a rule reaches one")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_with_secret(value: &str) -> JobEgress {
        let secret = Secret { host: "api.example.com".parse().expect("rule"), value: value.to_owned() };
        JobEgress {
            tag: "job".into(),
            egress: Egress { token: "t".into(), rules: vec!["api.example.com".parse().expect("rule")] },
            secrets: Arc::new(TokenSecrets::new([(&"K".to_owned(), &secret)])),
            usage: Mutex::default(),
            limits: EgressLimits::default(),
            span: tracing::Span::none(),
        }
    }

    #[test]
    fn every_form_of_a_secret_is_scrubbed_from_answers() {
        let job = job_with_secret("tok\"en/+ x");
        let cases =
            ["a tok\"en/+ x and tok\"en/+ x", r#"{"echo": "tok\"en/+ x"}"#, "k=tok%22en%2F%2B+x", "dG9rImVuLysgeA=="];
        for case in cases {
            let scrubbed = job.scrub_text(case);
            assert!(scrubbed.contains("{{secret:K}}") && !scrubbed.contains("en/+"), "{case} became {scrubbed}");
        }
        assert_eq!(job.scrub_text("nothing"), "nothing");
    }

    #[test]
    fn secrets_go_out_only_over_https_to_their_host() {
        let job = job_with_secret("s3cret");
        let headers = vec![("authorization".to_owned(), "Bearer {{secret:K}}".to_owned())];
        let (sent, used) = with_secrets(&headers, &job, "https", "api.example.com", 443);
        assert_eq!((sent[0].1.as_str(), used), ("Bearer s3cret", true));
        for (scheme, host, port) in [("http", "api.example.com", 80), ("https", "other.example.com", 443)] {
            let (sent, used) = with_secrets(&headers, &job, scheme, host, port);
            assert_eq!((sent[0].1.as_str(), used), ("Bearer {{secret:K}}", false), "{scheme}://{host}");
        }
    }

    #[test]
    fn integrity_is_checked() {
        let sha = "sha256-LCa0a2j/xo/5m0U8HTBBNBNCLXBkg7+g+YpeiGJm564="; // "foo"
        assert!(check_integrity(sha, b"foo").is_ok());
        assert!(check_integrity(sha, b"bar").is_err());
        assert!(check_integrity("", b"anything").is_ok());
        assert!(check_integrity("md5-abc", b"foo").is_err());
    }

    #[test]
    fn destinations_name_host_and_port() {
        let url = |text: &str| Url::parse(text).expect("url");
        assert_eq!(destination(&url("https://Example.com/x")).expect("ok"), ("example.com".into(), 443));
        assert_eq!(destination(&url("http://[::1]:8080/")).expect("ok"), ("::1".into(), 8080));
        assert_eq!(destination(&url("http://0x7f.1/")).expect("ok"), ("127.0.0.1".into(), 80));
        assert!(destination(&url("ftp://example.com/")).is_err());
        assert!(destination(&url("file:///etc/passwd")).is_err());
    }

    #[tokio::test]
    async fn names_of_private_addresses_are_refused() {
        let error = PublicOnly.resolve("localhost".parse().expect("name")).await.err().expect("refused");
        assert!(error.to_string().contains("loopback"), "{error}");
    }
}
