//! `/mcp` at the HTTP level: the bearer token and the allowed `Host`
//! values. The protocol itself is tested with the official SDKs in
//! `clients/mcp/`.

use serde_json::json;

use crate::util::*;

/// Sends an MCP `initialize` to `api` with `host` as the `Host` header
/// and `token` as the bearer, and returns the status.
async fn initialize(api: &Api, host: Option<&str>, token: Option<&str>) -> u16 {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "e2e", "version": "0" } },
    });
    let mut request =
        api.http.post(api.url("/mcp")).header("accept", "application/json, text/event-stream").json(&body);
    if let Some(host) = host {
        request = request.header("host", host);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("send").status().as_u16()
}

#[tokio::test]
async fn the_token_is_checked_before_anything_else() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    assert_eq!(initialize(&api, None, Some(ALICE)).await, 200);
    assert_eq!(initialize(&api, None, None).await, 401);
    assert_eq!(initialize(&api, None, Some("alice-token-0123456789abcdeX")).await, 401);
    assert_eq!(initialize(&api, Some("evil.example"), None).await, 401);
}

#[tokio::test]
async fn only_the_allowed_hosts_are_answered() {
    let redis = Redis::start().await;
    let local = Api::start(&redis, &[]).await;
    assert_eq!(initialize(&local, Some("localhost:1234"), Some(ALICE)).await, 200);
    assert_eq!(initialize(&local, Some("evil.example"), Some(ALICE)).await, 403);

    let public = Api::start(&redis, &[("RUNBOX_MCP_ALLOWED_HOSTS", "runbox.example.com, api.internal:8080")]).await;
    assert_eq!(initialize(&public, Some("runbox.example.com"), Some(ALICE)).await, 200);
    assert_eq!(initialize(&public, Some("api.internal:8080"), Some(ALICE)).await, 200);
    assert_eq!(initialize(&public, Some("api.internal:9090"), Some(ALICE)).await, 403);
    assert_eq!(initialize(&public, None, Some(ALICE)).await, 403, "127.0.0.1 is not listed");

    let any = Api::start(&redis, &[("RUNBOX_MCP_ALLOWED_HOSTS", "*")]).await;
    assert_eq!(initialize(&any, Some("evil.example"), Some(ALICE)).await, 200);
}

#[tokio::test]
async fn a_bad_allowed_hosts_list_stops_the_api_and_names_it() {
    let redis = Redis::start().await;
    let mut api = Api::spawn_raw(&redis, &[("RUNBOX_MCP_ALLOWED_HOSTS", "*.example.com")]).await;
    assert!(!api.wait(std::time::Duration::from_secs(10)).await.success());
    assert!(api.logs().contains("RUNBOX_MCP_ALLOWED_HOSTS"), "{}", api.logs());
}
