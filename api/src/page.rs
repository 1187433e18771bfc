//! `GET /`: one page for people, to try runbox from a browser.
//!
//! The page (`page/index.html`, with `page/page.css` and `page/page.js`
//! put inline) is built into the binary and needs no token to load;
//! everything it shows comes from the same API, called with the token a
//! person pastes, which the page keeps in memory only. Nothing is fetched
//! from anywhere else.
//!
//! The Content-Security-Policy allows the one inline style and the one
//! inline script by their SHA-256, and connections to this origin only;
//! the page is assembled, and its hashes taken, once, on first use.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use base64::Engine;
use sha2::{Digest, Sha256};

const TEMPLATE: &str = include_str!("page/index.html");
const STYLE: &str = include_str!("page/page.css");
const SCRIPT: &str = include_str!("page/page.js");

/// The page as served, and the policy that lets exactly it run.
struct Page {
    html: String,
    policy: String,
}

static PAGE: LazyLock<Page> = LazyLock::new(|| {
    let html = TEMPLATE.replacen("<style></style>", &format!("<style>{STYLE}</style>"), 1).replacen(
        "<script></script>",
        &format!("<script>{SCRIPT}</script>"),
        1,
    );
    let policy = format!(
        "default-src 'none'; script-src '{}'; style-src '{}'; connect-src 'self'; img-src data:; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        sha256(SCRIPT),
        sha256(STYLE),
    );
    Page { html, policy }
});

/// A CSP source expression for inline text.
fn sha256(text: &str) -> String {
    format!("sha256-{}", base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text)))
}

/// Serves the page.
pub async fn index() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, PAGE.policy.as_str()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        PAGE.html.as_str(),
    )
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    async fn get_page() -> (axum::http::response::Parts, String) {
        let app = Router::new().route("/", get(index));
        let request = Request::get("/").body(Body::empty()).expect("a request");
        let (parts, body) = app.oneshot(request).await.expect("infallible").into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("the body");
        (parts, String::from_utf8(bytes.to_vec()).expect("UTF-8"))
    }

    /// The text between the first `open` and the `close` after it.
    fn between<'a>(html: &'a str, open: &str, close: &str) -> &'a str {
        let start = html.find(open).unwrap_or_else(|| panic!("no {open}")) + open.len();
        let end = html[start..].find(close).unwrap_or_else(|| panic!("no {close}")) + start;
        &html[start..end]
    }

    #[tokio::test]
    async fn the_page_is_html_whose_inline_code_the_policy_allows() {
        let (parts, html) = get_page().await;
        assert_eq!(parts.status, StatusCode::OK);
        assert_eq!(parts.headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
        let policy = parts.headers[header::CONTENT_SECURITY_POLICY].to_str().expect("ASCII");
        assert!(policy.starts_with("default-src 'none';"), "{policy}");
        assert!(policy.contains("connect-src 'self';"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
        // What the browser hashes is what is between the tags as served.
        for (open, close, directive) in [("<script>", "</script>", "script-src"), ("<style>", "</style>", "style-src")]
        {
            let inline = between(&html, open, close);
            assert!(inline.len() > 100, "{open} is empty");
            assert!(policy.contains(&format!("{directive} '{}';", sha256(inline))), "{directive}: {policy}");
        }
        assert_eq!(html.matches("<script").count(), 1, "one script, inline");
        assert_eq!(html.matches("<style").count(), 1, "one style, inline");
    }

    #[tokio::test]
    async fn the_page_names_nothing_elsewhere_and_states_the_boundary() {
        let (_, html) = get_page().await;
        for outside in ["://", " src=", "@import", "url(", "stylesheet"] {
            assert!(!html.contains(outside), "the page names {outside:?}: it must load nothing from elsewhere");
        }
        assert!(
            html.contains("process-level isolation for careless code, not a kernel boundary for hostile strangers")
        );
        // Kept in memory only.
        for store in ["localStorage", "sessionStorage", "document.cookie", "indexedDB"] {
            assert!(!SCRIPT.contains(store), "page.js uses {store}");
        }
    }
}
