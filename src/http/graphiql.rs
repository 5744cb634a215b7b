//! GraphiQL, served whole from the binary: the page of a browser's `GET /graphql` and its files
//! under `/graphql/assets/`, so the IDE works without internet access.
//!
//! The GraphiQL and React bundles are vendored from npm in `assets/graphiql/` by
//! `assets/graphiql/vendor.sh` (versions in `assets/graphiql/VERSIONS`, licences in
//! `assets/graphiql/LICENSES.txt`); the page and its start script are ours, next to this file.
//! The page names every file with its content hash (`?v=`), so each file can be cached for a
//! year and a new build is still picked up at once.

use std::sync::LazyLock;

use axum::{
    extract::Path,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use sha2::{Digest, Sha256};

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file the page loads.
const ASSETS: [Asset; 5] = [
    Asset { name: "graphiql.min.js", content_type: JS, bytes: include_bytes!("../../assets/graphiql/graphiql.min.js") },
    Asset {
        name: "graphiql.min.css",
        content_type: CSS,
        bytes: include_bytes!("../../assets/graphiql/graphiql.min.css"),
    },
    Asset {
        name: "react.production.min.js",
        content_type: JS,
        bytes: include_bytes!("../../assets/graphiql/react.production.min.js"),
    },
    Asset {
        name: "react-dom.production.min.js",
        content_type: JS,
        bytes: include_bytes!("../../assets/graphiql/react-dom.production.min.js"),
    },
    Asset { name: "start.js", content_type: JS, bytes: include_bytes!("graphiql/start.js") },
];

/// Cached for a year and never revalidated: a file's URL changes with its content.
const IMMUTABLE: HeaderValue = HeaderValue::from_static("public, max-age=31536000, immutable");

/// Scripts and styles only from this server (the page's one inline style aside), requests only
/// to it, and no framing: the page handles bearer tokens.
const PAGE_POLICY: HeaderValue = HeaderValue::from_static(
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
     font-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
);

/// The entity tag of each file of [`ASSETS`] (by position): its SHA-256, shortened. Computed
/// on the first GraphiQL request, not at start-up.
static TAGS: LazyLock<Vec<String>> =
    LazyLock::new(|| ASSETS.iter().map(|a| hex::encode(&Sha256::digest(a.bytes)[..12])).collect());

/// The page, with each file's tag in its URL.
static PAGE: LazyLock<String> = LazyLock::new(|| {
    ASSETS.iter().zip(TAGS.iter()).fold(include_str!("graphiql/page.html").to_owned(), |page, (asset, tag)| {
        page.replace(&format!("{{{{{}}}}}", asset.name), tag)
    })
});

/// The GraphiQL page.
pub(super) fn page() -> Response {
    let mut response = (StatusCode::OK, PAGE.as_str()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    // Small, and it names the current files: always asked again.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, PAGE_POLICY);
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// `GET /graphql/assets/{file}`.
pub(super) async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    let Some(index) = ASSETS.iter().position(|a| a.name == name) else {
        return (StatusCode::NOT_FOUND, "no such GraphiQL file").into_response();
    };
    let asset = &ASSETS[index];
    let etag = format!("\"{}\"", TAGS[index]);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut ok = (StatusCode::OK, asset.bytes).into_response();
        ok.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
        ok
    };
    let out = response.headers_mut();
    out.insert(header::CACHE_CONTROL, IMMUTABLE);
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        out.insert(header::ETAG, etag);
    }
    out.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_every_file_with_its_tag() {
        assert!(!PAGE.contains("{{"), "a placeholder is left: {}", *PAGE);
        for (asset, tag) in ASSETS.iter().zip(TAGS.iter()) {
            assert!(PAGE.contains(&format!("graphql/assets/{}?v={tag}", asset.name)), "{}", asset.name);
        }
        assert!(PAGE.contains("<title>clinic-booking</title>"));
    }

    #[test]
    fn the_vendored_files_are_the_ones_vendor_sh_wrote() {
        // A file edited by hand, or replaced without the script, fails here.
        let sums = include_str!("../../assets/graphiql/SHA256SUMS");
        for asset in ASSETS.iter().filter(|a| a.name != "start.js") {
            let line = sums.lines().find(|l| l.ends_with(&format!("  {}", asset.name)));
            let expected = line.and_then(|l| l.split_whitespace().next());
            assert_eq!(expected, Some(hex::encode(Sha256::digest(asset.bytes)).as_str()), "{}", asset.name);
        }
    }
}
