//! Redis as users deploy it: TLS (`rediss://`) with a username and
//! password, as managed Redis needs; and a server that would evict keys,
//! which both processes refuse at start with a message saying what to change.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::process::Command;

use crate::util::*;

#[tokio::test]
async fn tls_with_a_user_and_password_works_end_to_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    test_certificates(dir.path());
    let port = free_port();
    let file = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let _server = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--tls-cert-file", &file("server.pem"), "--tls-key-file", &file("server.key")])
        .args(["--tls-ca-cert-file", &file("ca.pem"), "--tls-auth-clients", "no"])
        .args(["--user", "default", "off", "--user", "runbox", "on", ">s3cret-pass", "~*", "&*", "+@all"])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let url = format!("rediss://runbox:s3cret-pass@localhost:{port}");
    // The test CA is trusted through SSL_CERT_FILE, as a private CA would be.
    let env = [("REDIS_URL", url.as_str()), ("SSL_CERT_FILE", &*file("ca.pem"))];
    let placeholder = Redis::absent(port);
    let api = Api::start(&placeholder, &env).await;
    let _worker = start_worker(&placeholder, &env).await;
    let (status, job) = api.submit(json!({ "language": "js", "code": "console.log('over tls')" }), Some(30)).await;
    assert_eq!((status, job["stdout"].as_str()), (200, Some("over tls\n")), "{job}\n{}", api.process.logs());

    // A wrong password is an error, not a silent fallback.
    let wrong = format!("rediss://runbox:wrong@localhost:{port}");
    let env = [("REDIS_URL", wrong.as_str()), ("SSL_CERT_FILE", &*file("ca.pem"))];
    let api = Api::start(&placeholder, &env).await;
    let response = api.http.get(api.url("/readyz")).send().await.expect("readyz");
    assert_eq!(response.status(), 503);
}

#[tokio::test]
async fn a_redis_that_evicts_keys_is_refused_at_start() {
    let redis = Redis::start_with(free_port(), &["--maxmemory-policy", "allkeys-lru"]).await;
    let mut api = Api::spawn_raw(&redis, &[]).await;
    let status = api.wait(Duration::from_secs(20)).await;
    assert!(!status.success());
    let logs = api.logs();
    assert!(logs.contains("maxmemory-policy is allkeys-lru") && logs.contains("noeviction"), "{logs}");
    let mut worker = spawn_worker(&redis, &[]).await;
    let status = worker.wait(Duration::from_secs(60)).await;
    assert!(!status.success());
    assert!(worker.logs().contains("maxmemory-policy is allkeys-lru"), "{}", worker.logs());
}
