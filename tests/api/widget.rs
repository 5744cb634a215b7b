//! The embeddable availability widget: `GET /widget/clinic-availability.js` (caching, CORS),
//! the `/widget` page, and the element itself in headless Chromium on a page of another origin
//! (`tests/browser/widget.mjs`), kept live through bookings, a second instance, a Redis restart
//! and a restart of its own instance.

use std::{
    io::{BufRead, BufReader, Read, Write},
    path::Path,
    process::{Child, ChildStdin, Command, Stdio},
    time::Duration,
};

use chrono::Timelike;
use reqwest::header::HeaderMap;
use serde_json::json;

use crate::{helpers::*, servers::free_port, subscriptions::PrivateRedis};

/// An origin the tests allow.
const APP: &str = "https://app.example.com";

fn header<'h>(headers: &'h HeaderMap, name: &str) -> &'h str {
    headers.get(name).map_or("", |v| v.to_str().unwrap())
}

#[tokio::test]
async fn the_module_is_served_with_an_etag_a_short_cache_life_and_cors() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("CORS_ALLOWED_ORIGINS", APP)]).await;
    let url = format!("{}/widget/clinic-availability.js", app.address);

    let first = app.client.get(&url).header("origin", APP).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let h = first.headers().clone();
    assert_eq!(header(&h, "content-type"), "text/javascript; charset=utf-8");
    assert_eq!(header(&h, "cache-control"), "public, max-age=300");
    assert_eq!(header(&h, "x-content-type-options"), "nosniff");
    assert_eq!(header(&h, "access-control-allow-origin"), APP, "pages of allowed origins may load it");
    assert!(header(&h, "access-control-expose-headers").contains("etag"));
    let etag = header(&h, "etag").to_owned();
    assert!(etag.len() > 20 && etag.starts_with('"') && etag.ends_with('"'), "a strong tag: {etag}");
    let body = first.text().await.unwrap();
    assert!(body.contains("customElements.define('clinic-availability'"), "the module defines the element");

    // Revalidation: the same tag (weak or strong, alone or in a list) is a 304 without a body.
    for held in [etag.clone(), format!("W/{etag}"), format!("\"older\", {etag}")] {
        let again =
            app.client.get(&url).header("origin", APP).header("if-none-match", held.as_str()).send().await.unwrap();
        assert_eq!(again.status(), 304, "{held}");
        assert_eq!(header(again.headers(), "etag"), etag);
        assert_eq!(header(again.headers(), "cache-control"), "public, max-age=300");
        assert_eq!(header(again.headers(), "access-control-allow-origin"), APP);
        assert!(again.bytes().await.unwrap().is_empty());
    }
    let changed = app.client.get(&url).header("if-none-match", "\"older\"").send().await.unwrap();
    assert_eq!(changed.status(), 200);

    // Pages of other origins get no CORS header, so their browsers refuse the module; caches
    // are told the answer depends on Origin.
    let refused = app.client.get(&url).header("origin", "https://evil.example.com").send().await.unwrap();
    assert_eq!(refused.status(), 200);
    assert!(!refused.headers().keys().any(|k| k.as_str().starts_with("access-control-")));
    assert!(header(refused.headers(), "vary").to_ascii_lowercase().contains("origin"));
    let plain = app.client.get(&url).send().await.unwrap();
    assert!(!plain.headers().contains_key("access-control-allow-origin"));
}

#[tokio::test]
async fn the_widget_page_is_served_from_the_binary() {
    let (app, _db) = TestApp::spawn().await;
    let page = app.client.get(format!("{}/widget", app.address)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(header(page.headers(), "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(page.headers(), "cache-control"), "no-cache");
    let policy = header(page.headers(), "content-security-policy").to_owned();
    assert!(policy.contains("script-src 'self' 'sha256-") && policy.contains("connect-src 'self'"), "{policy}");
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"<script type="module" src="widget/clinic-availability.js"></script>"#));
    assert!(!html.contains("://"), "the page loads nothing from elsewhere: {html}");
}

/// Zones a doctor of the browser test may have, about two hours apart all round the clock.
const ZONES: [&str; 14] = [
    "Pacific/Honolulu",
    "America/Los_Angeles",
    "America/Chicago",
    "America/Sao_Paulo",
    "Atlantic/Cape_Verde",
    "Europe/Paris",
    "Europe/Moscow",
    "Asia/Dubai",
    "Asia/Kolkata",
    "Asia/Bangkok",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Pacific/Auckland",
    "Pacific/Kiritimati",
];

/// The zone of [`ZONES`] where it is now closest to 11:00, and today's date there: a doctor
/// there has its evening of today ahead whenever the test runs, so the widget's default day
/// (today in the doctor's zone) has slots to show.
fn a_zone_in_its_morning() -> (&'static str, String) {
    let now = chrono::Utc::now();
    let (_, zone, day) = ZONES
        .iter()
        .map(|name| {
            let local = now.with_timezone(&name.parse::<chrono_tz::Tz>().unwrap());
            let minutes = i64::from(local.hour() * 60 + local.minute());
            ((minutes - 11 * 60).abs(), *name, local.date_naive())
        })
        .min_by_key(|(distance, _, _)| *distance)
        .unwrap();
    (zone, day.format("%Y-%m-%d").to_string())
}

/// Creates a doctor (as admin) with a day of slots; returns its id and the slot ids.
async fn doctor_with_day(app: &TestApp, name: &str, zone: &str, date: &str, capacity: i32) -> (String, Vec<String>) {
    let created = app
        .gql(
            Some(&admin()),
            "mutation($n:String!,$tz:String){createDoctor(input:{name:$n,specialty:\"general\",timezone:$tz}){id}}",
            json!({ "n": name, "tz": zone }),
        )
        .await;
    let id = created["createDoctor"]["id"].as_str().unwrap().to_owned();
    let slots = app.publish(&id, date, "19:00", "20:00", 15, capacity).await;
    (id, slots)
}

/// `node tests/browser/widget.mjs`, talking over its standard streams: it prints progress and
/// requests (`@@ stop-redis`, …), and reads the setup and each request's `done` on its input.
struct Script {
    /// `None` once it has ended.
    child: Option<Child>,
    input: ChildStdin,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    printed: Vec<String>,
    errors: Option<std::thread::JoinHandle<String>>,
}

impl Script {
    fn start(path: &Path) -> Self {
        let mut child = Command::new("node")
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node runs");
        let input = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Self { child: Some(child), input, lines, printed: Vec::new(), errors: Some(errors) }
    }

    /// The next line it prints; `None` once it has ended.
    async fn line(&mut self) -> Option<String> {
        let line = self.lines.recv().await?;
        self.printed.push(line.clone());
        Some(line)
    }

    fn send(&mut self, line: &str) {
        writeln!(self.input, "{line}").and_then(|()| self.input.flush()).expect("the script reads its input");
    }

    /// Waits for its end; panics with everything it said unless it succeeded.
    async fn finish(mut self) {
        let mut child = self.child.take().unwrap();
        let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
        let errors = self.errors.take().and_then(|e| e.join().ok()).unwrap_or_default();
        let printed = self.printed.join("\n");
        assert!(status.success(), "the browser test failed ({status}):\n{printed}\n{errors}");
        // What it checked, for `--nocapture`.
        println!("{printed}");
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        // A failed test leaves no browser behind.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Everything `tests/browser/widget.mjs` checks, in one browser launch (see its header): the
/// widget on a page of another origin, live within a second of each booking and cancel, through
/// a second instance, a Redis restart and a restart of its own instance; the keyboard and
/// `slot-select`; axe-core; the host page's CSS kept out; and a page of a refused origin.
#[tokio::test]
async fn the_widget_stays_live_on_another_sites_page_in_headless_chromium() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let browser = root.join("tests/browser");
    let present = Path::new("/usr/bin/chromium").exists()
        && browser.join("node_modules/playwright-core").exists()
        && browser.join("node_modules/axe-core").exists()
        && Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    let tool = "headless Chromium (/usr/bin/chromium, node, and `npm ci --prefix tests/browser`)";
    if skip_without(tool, present) {
        return;
    }
    let mut script = Script::start(&browser.join("widget.mjs"));
    let first = script.line().await.unwrap_or_default();
    let host_port: u16 = first.strip_prefix("host ").and_then(|p| p.parse().ok()).expect("the host page's port");

    // PostgreSQL runs have Redis: a private one here, so that this test may restart it. On
    // SQLite there is no Redis (single-process mode), hence no second instance either: those
    // two steps are skipped there.
    let mut redis = if has_redis() { Some(PrivateRedis::start().await.expect("redis-server starts")) } else { None };
    let database = TestDatabase::new().await;
    let origins = format!("http://clinic-host.test:{host_port}");
    let bind = format!("127.0.0.1:{}", free_port());
    let redis_url = redis.as_ref().map(PrivateRedis::url).unwrap_or_default();
    let mut settings = vec![("CORS_ALLOWED_ORIGINS", origins.as_str())];
    if redis.is_some() {
        settings.push(("REDIS_URL", redis_url.as_str()));
    }
    let b = match redis {
        Some(_) => Some(TestApp::spawn_on(&database, &settings).await),
        None => None,
    };
    // The widget's own instance listens on a port chosen here, so that it can come back on it.
    settings.push(("BIND_ADDR", bind.as_str()));
    let mut a = Some(TestApp::spawn_on(&database, &settings).await);
    let a_address = a.as_ref().unwrap().address.clone();

    let (zone, today) = a_zone_in_its_morning();
    let (live, live_slots) = doctor_with_day(a.as_ref().unwrap(), "Dr Ada Lovelace", zone, &today, 1).await;
    let day = tomorrow();
    let (other, other_slots) = doctor_with_day(a.as_ref().unwrap(), "Dr Grace Hopper", "UTC", &day, 2).await;
    let setup = json!({
        "a": a_address,
        "b": b.as_ref().map(|b| b.address.clone()),
        "redis": redis.is_some(),
        "live": { "id": live, "name": "Dr Ada Lovelace", "zone": zone, "date": today, "slots": live_slots },
        "other": { "id": other, "name": "Dr Grace Hopper", "zone": "UTC", "date": day, "slots": other_slots },
        "tokens": (1..=8).map(patient).collect::<Vec<_>>(),
        "screenshot": std::env::var("WIDGET_SCREENSHOT").ok(),
    });
    script.send(&setup.to_string());

    let talk = async {
        while let Some(line) = script.line().await {
            let Some(request) = line.strip_prefix("@@ ") else { continue };
            match request {
                "stop-redis" => redis.as_mut().expect("a Redis run").stop(),
                "start-redis" => assert!(redis.as_mut().expect("a Redis run").spawn().await, "Redis restarts"),
                "stop-a" => a.take().expect("instance A runs").stop().await,
                "start-a" => a = Some(TestApp::spawn_on(&database, &settings).await),
                other => panic!("unknown request from the script: {other}"),
            }
            script.send("done");
        }
    };
    // The script bounds its own run (three minutes); this only guards against a hung pipe.
    let talked = tokio::time::timeout(Duration::from_secs(240), talk).await;
    assert!(talked.is_ok(), "the browser test hung:\n{}", script.printed.join("\n"));
    script.finish().await;
}
