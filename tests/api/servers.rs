//! Real servers the messages go to, started by the tests on 127.0.0.1: an SMTP server
//! (Python's aiosmtpd running `tests/servers/smtp_sink.py`) and an HTTP SMS gateway (axum).
//!
//! A test whose tool is missing skips with one printed line, unless
//! `CLINIC_REQUIRE_EXTERNAL_TESTS=1`, which makes it fail instead (CI installs the tools; see
//! `helpers::skip_without`).

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::Value;

/// How long a test waits for something that should happen within seconds.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// A port nothing listens on (bound, then released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// Waits until `check` returns something, for at most [`PATIENCE`].
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One message the SMTP server received.
#[derive(Clone, Debug)]
pub(crate) struct Received {
    /// `MAIL FROM`.
    pub(crate) mail_from: String,
    /// `RCPT TO`, each.
    pub(crate) rcpt_tos: Vec<String>,
    /// The DATA, as sent.
    pub(crate) data: String,
}

impl Received {
    /// The value of the first header `name` (unfolded).
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        let head = self.data.split("\r\n\r\n").next()?;
        let unfolded = head.replace("\r\n ", " ").replace("\r\n\t", " ");
        unfolded.split("\r\n").find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
        })
    }

    /// The iCalendar objects attached (7-bit parts, as the service sends ASCII calendars),
    /// each with its MIME type, unfolded.
    pub(crate) fn calendars(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for part in self.data.split("\r\n--") {
            let Some((head, body)) = part.split_once("\r\n\r\n") else { continue };
            let head = head.replace("\r\n ", " ");
            let Some(content_type) = head
                .split("\r\n")
                .find_map(|l| l.strip_prefix("Content-Type: ").filter(|t| t.starts_with("text/calendar")))
            else {
                continue;
            };
            out.push((content_type.to_owned(), body.replace("\r\n ", "")));
        }
        out
    }
}

/// An SMTP server (aiosmtpd) on 127.0.0.1, storing what it receives.
pub(crate) struct SmtpSink {
    child: Child,
    dir: tempfile::TempDir,
    /// Its port.
    pub(crate) port: u16,
}

impl SmtpSink {
    /// A Python that has aiosmtpd: `CLINIC_TEST_PYTHON`, the venv `.ci/run` makes under
    /// `target/py`, or `python3`.
    fn python() -> Option<PathBuf> {
        let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/py/bin/python");
        let candidates =
            std::env::var_os("CLINIC_TEST_PYTHON").map(PathBuf::from).into_iter().chain([venv, "python3".into()]);
        candidates.into_iter().find(|python| {
            Command::new(python)
                .args(["-c", "import aiosmtpd"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    }

    /// Starts the server on `port` (`None`: a free one); `None` when aiosmtpd is missing and
    /// the test should skip.
    pub(crate) async fn start(port: Option<u16>) -> Option<Self> {
        Self::start_refusing(port, 0).await
    }

    /// [`Self::start`], answering the first `refuse` messages with an SMTP 554.
    pub(crate) async fn start_refusing(port: Option<u16>, refuse: usize) -> Option<Self> {
        Self::launch(port, &["--refuse-first".to_owned(), refuse.to_string()]).await
    }

    /// [`Self::start`], taking the first `taken` messages and answering every later one with
    /// an SMTP 451 (a refusal for now).
    pub(crate) async fn start_refusing_for_now_after(taken: usize) -> Option<Self> {
        Self::launch(None, &["--refuse-after".to_owned(), taken.to_string(), "--temporary".to_owned()]).await
    }

    /// Starts `smtp_sink.py` with `args` besides its directory and port.
    async fn launch(port: Option<u16>, args: &[String]) -> Option<Self> {
        let python = Self::python();
        if crate::helpers::skip_without("Python with aiosmtpd (see .ci/run)", python.is_some()) {
            return None;
        }
        let python = python?;
        let dir = tempfile::tempdir().expect("temp dir");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/smtp_sink.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg("--dir")
            .arg(dir.path())
            .args(["--port", &port.unwrap_or(0).to_string()])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the SMTP sink");
        let stdout = child.stdout.take().expect("sink stdout");
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        });
        let line = tokio::time::timeout(PATIENCE, line).await.expect("the sink starts").expect("join").expect("read");
        let port = line.trim().strip_prefix("LISTENING ").and_then(|p| p.parse().ok()).expect("the sink's port");
        Some(Self { child, dir, port })
    }

    /// `SMTP_URL` of this server.
    pub(crate) fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// Everything received so far, in order.
    pub(crate) fn received(&self) -> Vec<Received> {
        let mut names: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .expect("sink dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| {
                let v: Value = serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("json");
                Received {
                    mail_from: v["mail_from"].as_str().unwrap_or_default().to_owned(),
                    rcpt_tos: v["rcpt_tos"]
                        .as_array()
                        .map(|a| a.iter().filter_map(|r| r.as_str().map(str::to_owned)).collect())
                        .unwrap_or_default(),
                    data: v["data"].as_str().unwrap_or_default().to_owned(),
                }
            })
            .collect()
    }

    /// How many DATA transactions it refused so far.
    pub(crate) fn refused(&self) -> usize {
        std::fs::read_dir(self.dir.path())
            .expect("sink dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "refused"))
            .count()
    }

    /// Waits until at least `n` messages arrived; returns all of them.
    pub(crate) async fn wait_for(&self, n: usize) -> Vec<Received> {
        eventually(&format!("{n} emails"), || async {
            let got = self.received();
            (got.len() >= n).then_some(got)
        })
        .await
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The basic-auth user and password of the test gateway.
pub(crate) const SMS_USER: &str = "AC123";
/// See [`SMS_USER`].
pub(crate) const SMS_PASSWORD: &str = "s3cret-token";
/// `Basic base64("AC123:s3cret-token")`.
const SMS_AUTHORIZATION: &str = "Basic QUMxMjM6czNjcmV0LXRva2Vu";

/// What the gateway saw.
#[derive(Debug, Default)]
pub(crate) struct GatewayLog {
    /// Forms of the requests it accepted (2xx).
    pub(crate) accepted: Vec<HashMap<String, String>>,
    /// Requests without the right credentials.
    pub(crate) unauthorized: usize,
    /// Requests it failed on purpose.
    pub(crate) failed: usize,
}

/// An SMS gateway taking the Twilio Messages form, on 127.0.0.1.
pub(crate) struct SmsGateway {
    /// What it saw.
    pub(crate) log: Arc<Mutex<GatewayLog>>,
    /// Its port.
    pub(crate) port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl SmsGateway {
    /// Starts it; it answers 503 to the first `fail_first` authorised requests.
    pub(crate) async fn start(fail_first: usize) -> Self {
        use axum::{extract::State, http::HeaderMap, http::StatusCode, routing::post, Form, Json, Router};
        type Shared = (Arc<Mutex<GatewayLog>>, usize);
        async fn messages(
            State((log, fail_first)): State<Shared>,
            headers: HeaderMap,
            Form(form): Form<HashMap<String, String>>,
        ) -> (StatusCode, Json<Value>) {
            let mut log = log.lock().expect("log");
            if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(SMS_AUTHORIZATION) {
                log.unauthorized += 1;
                return (StatusCode::UNAUTHORIZED, Json(serde_json::json!({"message": "bad credentials"})));
            }
            if log.failed < fail_first {
                log.failed += 1;
                return (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({"message": "try later"})));
            }
            log.accepted.push(form);
            let sid = format!("SM{:032}", log.accepted.len());
            (StatusCode::CREATED, Json(serde_json::json!({"sid": sid, "status": "queued"})))
        }
        let log = Arc::new(Mutex::new(GatewayLog::default()));
        let app = Router::new()
            .route("/2010-04-01/Accounts/AC123/Messages.json", post(messages))
            .with_state((Arc::clone(&log), fail_first));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { log, port, task }
    }

    /// `SMS_URL` of this gateway, with its credentials.
    pub(crate) fn url(&self) -> String {
        format!("http://{SMS_USER}:{SMS_PASSWORD}@127.0.0.1:{}/2010-04-01/Accounts/AC123/Messages.json", self.port)
    }

    /// Waits until it accepted at least `n` messages; returns their forms.
    pub(crate) async fn wait_for(&self, n: usize) -> Vec<HashMap<String, String>> {
        eventually(&format!("{n} SMS"), || async {
            let log = self.log.lock().expect("log");
            (log.accepted.len() >= n).then(|| log.accepted.clone())
        })
        .await
    }
}

impl Drop for SmsGateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}
