//! The browser-facing edge: CORS on `/graphql`, which origins may open a WebSocket, and
//! GraphiQL working offline in a real headless Chromium.

use reqwest::{header::HeaderMap, Method};
use serde_json::json;
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};

use crate::helpers::*;

/// The origin the tests allow.
const APP: &str = "https://app.example.com";
/// An origin no test allows.
const EVIL: &str = "https://evil.example.com";

async fn preflight(app: &TestApp, origin: Option<&str>) -> reqwest::Response {
    let mut req = app
        .client
        .request(Method::OPTIONS, format!("{}/graphql", app.address))
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization,content-type");
    if let Some(origin) = origin {
        req = req.header("origin", origin);
    }
    req.send().await.unwrap()
}

async fn post_from(app: &TestApp, origin: &str) -> reqwest::Response {
    app.client
        .post(format!("{}/graphql", app.address))
        .header("origin", origin)
        .json(&json!({ "query": "{doctors(first:1){nodes{id}}}" }))
        .send()
        .await
        .unwrap()
}

/// The names of the `access-control-*` headers of an answer.
fn cors_headers(headers: &HeaderMap) -> Vec<String> {
    headers.keys().map(|k| k.as_str().to_owned()).filter(|k| k.starts_with("access-control-")).collect()
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> &'h str {
    headers.get(name).map_or("", |v| v.to_str().unwrap())
}

/// The comma-separated items of a header, lower case.
fn items(headers: &HeaderMap, name: &str) -> Vec<String> {
    header(headers, name).split(',').map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect()
}

#[tokio::test]
async fn cors_answers_allowed_origins_only() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("CORS_ALLOWED_ORIGINS", &format!("{APP}, http://localhost:3000"))]).await;

    let allowed = preflight(&app, Some(APP)).await;
    assert!(matches!(allowed.status().as_u16(), 200 | 204), "{}", allowed.status());
    let h = allowed.headers();
    assert_eq!(header(h, "access-control-allow-origin"), APP);
    assert_eq!(header(h, "access-control-allow-credentials"), "true");
    assert_eq!(items(h, "access-control-allow-methods"), ["get", "post", "options"]);
    assert_eq!(
        items(h, "access-control-allow-headers"),
        ["authorization", "content-type", "x-request-id", "idempotency-key", "prefer", "if-none-match"]
    );
    assert_eq!(header(h, "access-control-max-age"), "600");
    assert!(items(h, "vary").contains(&"origin".to_owned()), "{h:?}");

    let answer = post_from(&app, APP).await;
    assert_eq!(answer.status(), 200);
    let h = answer.headers();
    assert_eq!(header(h, "access-control-allow-origin"), APP);
    assert_eq!(items(h, "access-control-expose-headers"), ["x-request-id", "retry-after", "location", "etag"]);
    assert!(h.contains_key("x-request-id"));

    // Another origin gets no CORS header at all; its preflight is still a success, so the
    // browser reports the missing Access-Control-Allow-Origin (the actual cause).
    let refused = preflight(&app, Some(EVIL)).await;
    assert_eq!(refused.status(), 204);
    assert_eq!(cors_headers(refused.headers()), Vec::<String>::new());
    let answer = post_from(&app, EVIL).await;
    assert_eq!(answer.status(), 200, "the server answers; the browser withholds it from the page");
    assert_eq!(cors_headers(answer.headers()), Vec::<String>::new());
    assert!(items(answer.headers(), "vary").contains(&"origin".to_owned()), "caches must key by Origin");

    // An OPTIONS request that is no preflight is no concern of CORS.
    assert_eq!(preflight(&app, None).await.status(), 405);
    // The other routes are not for other sites' pages.
    let health = app.client.get(format!("{}/healthz", app.address)).header("origin", APP).send().await.unwrap();
    assert_eq!(cors_headers(health.headers()), Vec::<String>::new());
}

#[tokio::test]
async fn any_origin_is_allowed_without_credentials() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("CORS_ALLOWED_ORIGINS", "*")]).await;
    let allowed = preflight(&app, Some(EVIL)).await;
    assert!(matches!(allowed.status().as_u16(), 200 | 204), "{}", allowed.status());
    assert_eq!(header(allowed.headers(), "access-control-allow-origin"), "*");
    assert!(!allowed.headers().contains_key("access-control-allow-credentials"));
    let answer = post_from(&app, EVIL).await;
    assert_eq!(header(answer.headers(), "access-control-allow-origin"), "*");
}

#[tokio::test]
async fn without_the_setting_no_other_site_is_allowed_in_production() {
    let database = TestDatabase::new().await;
    // Single-process dev mode (SQLite, no Redis) allows local dev servers instead.
    if database.config(&[]).single_process() {
        return;
    }
    let app = TestApp::spawn_on(&database, &[]).await;
    for origin in [APP, "http://localhost:3000"] {
        assert_eq!(cors_headers(preflight(&app, Some(origin)).await.headers()), Vec::<String>::new(), "{origin}");
    }
}

/// Opens `/graphql/ws` with this `Origin` (none: `None`); `Err` holds the refusal's status.
async fn handshake(app: &TestApp, origin: Option<&str>) -> Result<(), u16> {
    let mut req = format!("ws://127.0.0.1:{}/graphql/ws", app.port).into_client_request().unwrap();
    req.headers_mut().insert("sec-websocket-protocol", "graphql-transport-ws".parse().unwrap());
    if let Some(origin) = origin {
        req.headers_mut().insert("origin", origin.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok(_) => Ok(()),
        Err(tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("handshake failed: {e}"),
    }
}

#[tokio::test]
async fn websockets_refuse_pages_of_foreign_origins() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("CORS_ALLOWED_ORIGINS", APP)]).await;
    let own = format!("http://127.0.0.1:{}", app.port);
    assert_eq!(handshake(&app, Some(EVIL)).await, Err(403));
    assert_eq!(handshake(&app, Some("null")).await, Err(403), "sandboxed pages and files");
    // The same machine under another name is another origin.
    assert_eq!(handshake(&app, Some(&format!("http://localhost:{}", app.port))).await, Err(403));
    assert_eq!(handshake(&app, Some(&format!("http://127.0.0.1:{}", app.port ^ 1))).await, Err(403));

    assert_eq!(handshake(&app, Some(&own)).await, Ok(()), "pages the server served, e.g. GraphiQL");
    assert_eq!(handshake(&app, Some(APP)).await, Ok(()), "an allowed origin");
    assert_eq!(handshake(&app, None).await, Ok(()), "clients that are not browsers");
}

#[tokio::test]
async fn graphiql_works_offline_in_headless_chromium() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/browser/graphiql.mjs");
    let present = std::path::Path::new("/usr/bin/chromium").exists()
        && root.join("tests/browser/node_modules/playwright-core").exists()
        && std::process::Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    let tool = "headless Chromium (/usr/bin/chromium, node, and `npm ci --prefix tests/browser`)";
    if skip_without(tool, present) {
        return;
    }
    let (app, _db) = TestApp::spawn().await;
    let (doctor, _slot) = app.doctor_with_slot(1).await;
    let args = [app.address.clone(), doctor, tomorrow(), patient(7)];
    // The server runs on this test's runtime while the script runs on a thread of its own.
    let output =
        tokio::task::spawn_blocking(move || std::process::Command::new("node").arg(script).args(args).output())
            .await
            .unwrap()
            .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the browser test failed ({}):\n{stdout}\n{stderr}", output.status);
}

#[tokio::test]
async fn graphiql_is_served_from_the_binary() {
    let (app, _db) = TestApp::spawn().await;
    let page = app.client.get(format!("{}/graphql", app.address)).header("accept", "text/html").send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(header(page.headers(), "content-type"), "text/html; charset=utf-8");
    assert!(header(page.headers(), "content-security-policy").contains("script-src 'self'"));
    let html = page.text().await.unwrap();
    assert!(html.contains("<title>clinic-booking</title>"));
    assert!(!html.contains("://"), "the page loads nothing from elsewhere: {html}");
    let files: Vec<&str> = html.split('"').filter(|s| s.starts_with("graphql/assets/")).collect();
    assert_eq!(files.len(), 5, "{html}");
    for file in files {
        let url = format!("{}/{file}", app.address);
        let resp = app.client.get(&url).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{file}");
        let kind = if file.contains(".css") { "text/css; charset=utf-8" } else { "text/javascript; charset=utf-8" };
        assert_eq!(header(resp.headers(), "content-type"), kind, "{file}");
        assert_eq!(header(resp.headers(), "cache-control"), "public, max-age=31536000, immutable");
        let etag = header(resp.headers(), "etag").to_owned();
        // The tag in the URL is the file's entity tag: a new build names new URLs.
        assert!(etag.len() > 2 && file.ends_with(&format!("?v={}", etag.trim_matches('"'))), "{file} {etag}");
        assert!(!resp.bytes().await.unwrap().is_empty());
        let again = app.client.get(&url).header("if-none-match", &etag).send().await.unwrap();
        assert_eq!(again.status(), 304, "{file}");
        assert_eq!(header(again.headers(), "etag"), etag);
    }
    let missing = app.client.get(format!("{}/graphql/assets/nope.js", app.address)).send().await.unwrap();
    assert_eq!(missing.status(), 404);
}
