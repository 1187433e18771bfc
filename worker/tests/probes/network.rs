//! No job reaches the network, by any API, in either language. Each probe
//! aims at a listener the test opened on loopback and checks that it saw no
//! connection.

use crate::util::*;

async fn denied(language: runbox_common::Language, code: impl Fn(u16) -> String, needle: impl Fn(u16) -> String) {
    let listener = Listener::open();
    let outcome = run(language, &code(listener.port)).await;
    assert_fails_with(&outcome, &needle(listener.port));
    listener.assert_untouched();
}

fn net_access(port: u16) -> String {
    format!("Requires net access to \"127.0.0.1:{port}\"")
}

#[tokio::test]
async fn js_fetch() {
    denied(Js, |p| format!("await fetch('http://127.0.0.1:{p}/')"), net_access).await;
}

#[tokio::test]
async fn js_deno_connect() {
    denied(Js, |p| format!("await Deno.connect({{ hostname: '127.0.0.1', port: {p} }})"), net_access).await;
}

#[tokio::test]
async fn js_deno_listen() {
    let outcome = run(Js, "Deno.listen({ hostname: '127.0.0.1', port: 0 })").await;
    assert_fails_with(&outcome, "Requires net access to \"127.0.0.1:0\"");
}

#[tokio::test]
async fn js_websocket() {
    denied(
        Js,
        |p| format!("new WebSocket('ws://127.0.0.1:{p}/'); await new Promise((r) => setTimeout(r, 200))"),
        net_access,
    )
    .await;
}

#[tokio::test]
async fn ts_node_net() {
    denied(
        Ts,
        |p| {
            format!(
                "import net from 'node:net';
                 const socket: net.Socket = net.connect({p}, '127.0.0.1');
                 await new Promise((_, reject) => socket.on('error', reject));"
            )
        },
        net_access,
    )
    .await;
}

#[tokio::test]
async fn python_urllib() {
    denied(
        Py,
        |p| format!("import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{p}/')"),
        |_| "urllib.error.URLError".into(),
    )
    .await;
}

#[tokio::test]
async fn python_socket() {
    denied(Py, |p| format!("import socket\nsocket.create_connection(('127.0.0.1', {p}))"), |_| "OSError".into()).await;
}

#[tokio::test]
async fn python_pyfetch() {
    // A job's bare realm has no fetch (nor the AbortController pyfetch makes
    // first); a session's Worker has, without net access.
    let listener = Listener::open();
    let code = format!("import pyodide.http\nawait pyodide.http.pyfetch('http://127.0.0.1:{}/')", listener.port);
    let outcome = run(Py, &code).await;
    assert_fails_with_any(&outcome, &["is not defined", &net_access(listener.port)]);
    listener.assert_untouched();
}

#[tokio::test]
async fn python_js_fetch() {
    let listener = Listener::open();
    let outcome = run(Py, &format!("import js\nawait js.fetch('http://127.0.0.1:{}/')", listener.port)).await;
    assert_fails_with_any(&outcome, &["AttributeError: fetch", &net_access(listener.port)]);
    listener.assert_untouched();
}
