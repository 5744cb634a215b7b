//! The availability widget, served whole from the binary: `GET /widget/clinic-availability.js`,
//! the ES module that defines `<clinic-availability>` (`assets/widget/`, hand-written, no build
//! step), and `GET /widget`, a page to try it on a doctor and copy the snippet that embeds it
//! (next to this file). Static files only: the element reads and watches availability through
//! the public API, like any other client.

use std::sync::LazyLock;

use axum::{
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The element's module.
const SCRIPT: &[u8] = include_bytes!("../../assets/widget/clinic-availability.js");

/// The page of `GET /widget`.
const PAGE: &str = include_str!("widget/page.html");

/// Other sites embed the module by one fixed URL, so it may not be cached for long (as the
/// GraphiQL files are, whose URLs change with their content): five minutes, then revalidated
/// by its `ETag`, which costs a `304` without a body. A new release reaches every page within
/// five minutes.
const SCRIPT_CACHE: HeaderValue = HeaderValue::from_static("public, max-age=300");

/// The module's strong entity tag: its SHA-256, shortened. Computed on first use.
static SCRIPT_TAG: LazyLock<String> = LazyLock::new(|| format!("\"{}\"", hex::encode(&Sha256::digest(SCRIPT)[..16])));

/// The page's policy: its own inline style and script (named by hash), scripts from this
/// server, requests only to it, and no framing. The widget's styles are a constructed
/// stylesheet, which a policy does not govern.
static PAGE_POLICY: LazyLock<HeaderValue> = LazyLock::new(|| {
    let style = inline_hash(between(PAGE, "<style>", "</style>"));
    let script = inline_hash(between(PAGE, "<script type=\"module\">", "</script>"));
    let policy = format!(
        "default-src 'none'; script-src 'self' {script}; style-src {style}; connect-src 'self'; img-src data:; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    );
    // Hashes are base64, always valid in a header; the fallback only keeps this total.
    HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static("default-src 'none'"))
});

/// `GET /widget/clinic-availability.js`: the module, or `304` when the client holds it.
pub(super) async fn script(headers: HeaderMap) -> Response {
    let tag = SCRIPT_TAG.as_str();
    let mut response = if holds(&headers, tag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut ok = (StatusCode::OK, SCRIPT).into_response();
        ok.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/javascript; charset=utf-8"));
        ok
    };
    let out = response.headers_mut();
    out.insert(header::CACHE_CONTROL, SCRIPT_CACHE);
    if let Ok(tag) = HeaderValue::from_str(tag) {
        out.insert(header::ETAG, tag);
    }
    out.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// `GET /widget`: the page to try the widget and copy its snippet.
pub(super) async fn page() -> Response {
    let mut response = (StatusCode::OK, PAGE).into_response();
    let out = response.headers_mut();
    out.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    // Small, and it names the current module: always asked again.
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    out.insert(header::CONTENT_SECURITY_POLICY, PAGE_POLICY.clone());
    out.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    out.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// True when `If-None-Match` names `tag` (compared weakly, as RFC 9110 asks for this header) or `*`.
fn holds(headers: &HeaderMap, tag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == tag)
}

/// The text between the first `open` and the next `close` (empty when either is missing).
fn between<'p>(page: &'p str, open: &str, close: &str) -> &'p str {
    page.split_once(open).and_then(|(_, rest)| rest.split_once(close)).map_or("", |(inner, _)| inner)
}

/// The policy source that allows one inline element with exactly this text.
fn inline_hash(text: &str) -> String {
    format!("'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes())))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// The contract's budget for the module, gzipped.
    const MAX_GZIPPED: usize = 12_000;

    #[test]
    fn the_module_stays_under_its_size_budget() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        assert!(gz.write_all(SCRIPT).is_ok());
        let size = gz.finish().map(|b| b.len()).unwrap_or(usize::MAX);
        assert!(size < MAX_GZIPPED, "clinic-availability.js is {size} bytes gzipped, over {MAX_GZIPPED}");
    }

    #[test]
    fn the_entity_tag_is_the_hash_of_the_file_on_disk() {
        // A binary built before the file last changed would serve an older module.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/widget/clinic-availability.js");
        let on_disk = std::fs::read(path).unwrap_or_default();
        assert_eq!(*SCRIPT_TAG, format!("\"{}\"", hex::encode(&Sha256::digest(&on_disk)[..16])));
    }

    #[test]
    fn the_page_policy_allows_exactly_its_inline_style_and_script() {
        let policy = PAGE_POLICY.to_str().unwrap_or_default();
        assert_eq!(PAGE.matches("<style>").count(), 1);
        assert_eq!(PAGE.matches("<script type=\"module\">").count(), 1);
        let style = between(PAGE, "<style>", "</style>");
        let script = between(PAGE, "<script type=\"module\">", "</script>");
        assert!(style.contains("#preview") && script.contains("loadDoctors"), "the page's inline parts were found");
        assert!(policy.contains(&format!("style-src {}", inline_hash(style))), "{policy}");
        assert!(policy.contains(&format!("script-src 'self' {}", inline_hash(script))), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
    }

    #[test]
    fn if_none_match_compares_weakly_and_takes_lists() {
        let tag = SCRIPT_TAG.as_str();
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.insert(header::IF_NONE_MATCH, v);
            }
            holds(&headers, tag)
        };
        assert!(with(tag));
        assert!(with(&format!("W/{tag}")));
        assert!(with(&format!("\"other\", {tag}")));
        assert!(with("*"));
        assert!(!with("\"other\""));
        assert!(!holds(&HeaderMap::new(), tag));
    }
}
