//! `GET /openapi.json`: served without a token, with this api's limits, and
//! naming only routes the api answers.

use serde_json::Value;

use crate::util::*;

#[tokio::test]
async fn the_document_names_the_routes_the_api_serves() {
    let redis = Redis::start().await;
    let limits =
        [("RUNBOX_MAX_TIMEOUT_MS", "45000"), ("RUNBOX_SESSION_IDLE_S", "60"), ("RUNBOX_SESSION_MAX_IDLE_S", "90")];
    let api = Api::start(&redis, &limits).await;
    let response = api.http.get(api.url("/openapi.json")).send().await.expect("send");
    assert_eq!(response.status(), 200);
    let doc: Value = response.json().await.expect("JSON");
    assert_eq!(doc["openapi"], "3.1.0");

    // The configured limits, not the defaults.
    let schemas = &doc["components"]["schemas"];
    for name in ["JobRequest", "BatchJobRequest", "ExecRequest"] {
        assert_eq!(schemas[name]["properties"]["timeout_ms"]["maximum"], 45000, "{name}");
    }
    assert_eq!(schemas["SessionRequest"]["properties"]["idle_timeout_s"]["maximum"], 90);

    // Every documented operation is routed: without a token, a route behind
    // auth answers 401, where a path the api lacks would answer 404 no_route
    // and a method it lacks 405.
    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.len() >= 14, "{paths:?}");
    let mut operations = 0;
    for (path, item) in paths {
        let concrete = path.replace("{id}", "00000000-0000-4000-8000-000000000000");
        for (method, operation) in item.as_object().expect("operations") {
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("a method");
            let response = api.http.request(method.clone(), api.url(&concrete)).send().await.expect("send");
            let open = operation.get("security").is_some_and(|s| s == &serde_json::json!([{}]));
            if open {
                assert_eq!(response.status(), 200, "{method} {path}");
            } else {
                assert_eq!(response.status(), 401, "{method} {path} is documented but not routed behind auth");
            }
            operations += 1;
        }
    }
    assert_eq!(operations, 24);
}
