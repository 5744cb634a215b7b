//! Test harness: one fresh database per test, a real server on a free port, and a GraphQL
//! client that speaks to it over HTTP as a partner's client would.
//!
//! Where the databases live is chosen once per test process: see `backend.rs`.
//!
//! Each server runs on a Tokio runtime of its own, whose threads log (debug level for this
//! crate) into a buffer of that server; a failing test prints the buffers of its servers.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use clinic_booking::{
    auth::{Claims, TokenIssuer},
    config::{Config, Secret},
    db::Db,
    startup::Application,
};
use serde_json::{json, Value};

pub(crate) use crate::backend::has_redis;
use crate::backend::{backend, Backend};

/// Settings for tests that count a server's statements: none of its background polls (the
/// outbox relay's fallback, hold expiry, the message and webhook workers, each every second or
/// less by default) within a test, so that only the requests run statements, however slowly a
/// loaded machine runs them.
pub(crate) const QUIET: [(&str, &str); 4] = [
    ("OUTBOX_POLL_MS", "600000"),
    ("HOLD_EXPIRY_POLL_MS", "600000"),
    ("NOTIFY_POLL_MS", "600000"),
    ("WEBHOOK_POLL_MS", "600000"),
];

/// The signing secret of every test server.
pub(crate) const SECRET: &str = "test-secret-0123456789abcdef0123456789";

/// A fresh, empty database for one test (and the Redis key prefix that isolates it).
pub(crate) struct TestDatabase {
    /// Its `DATABASE_URL`.
    pub(crate) url: String,
    /// Its Redis URL, when the run has Redis.
    pub(crate) redis_url: Option<String>,
    /// A Redis key prefix unique to this database.
    pub(crate) redis_prefix: String,
    _dir: tempfile::TempDir,
    drop_pg: Option<(String, String)>,
}

impl TestDatabase {
    /// Makes a new database, migrated: a copy of the migrated template ([`template`]), so a
    /// test pays a file copy instead of every migration.
    pub(crate) async fn new() -> Self {
        Self::make(true).await
    }

    /// Makes a new, empty database (for tests of the migrations themselves).
    pub(crate) async fn empty() -> Self {
        Self::make(false).await
    }

    async fn make(migrated: bool) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let id = uuid::Uuid::new_v4().simple().to_string();
        let redis_prefix = format!("cbtest-{id}");
        match backend() {
            Backend::Sqlite => {
                let path = dir.path().join("test.sqlite3");
                if migrated {
                    std::fs::copy(template().await, &path).expect("copy the template database");
                }
                let url = format!("sqlite://{}", path.display());
                Self { url, redis_url: None, redis_prefix, _dir: dir, drop_pg: None }
            }
            Backend::Postgres { server_url, redis_url } => {
                use sqlx::Connection;
                let name = format!("cbt_{id}");
                let from = if migrated { format!(" TEMPLATE {}", template().await) } else { String::new() };
                let mut conn = sqlx::PgConnection::connect(&server_url).await.expect("connect to DATABASE_URL");
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}{from}")))
                    .execute(&mut conn)
                    .await
                    .expect("create database");
                let _ = conn.close().await;
                let url = replace_db_name(&server_url, &name);
                Self { url, redis_url, redis_prefix, _dir: dir, drop_pg: Some((server_url, name)) }
            }
        }
    }

    /// A database the test runs itself at `url` (nothing to drop afterwards), without Redis.
    pub(crate) fn at(url: String) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let redis_prefix = format!("cbtest-{}", uuid::Uuid::new_v4().simple());
        Self { url, redis_url: None, redis_prefix, _dir: dir, drop_pg: None }
    }

    /// The data directory of servers on this database (`DATA_DIR`).
    pub(crate) fn data_dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// The configuration of a server on this database.
    pub(crate) fn config(&self, extra: &[(&str, &str)]) -> Config {
        let mut vars: HashMap<String, String> = HashMap::from([
            ("DATABASE_URL".into(), self.url.clone()),
            ("JWT_SECRET".into(), SECRET.into()),
            ("BIND_ADDR".into(), "127.0.0.1:0".into()),
            ("DATA_DIR".into(), self._dir.path().display().to_string()),
            ("REDIS_KEY_PREFIX".into(), self.redis_prefix.clone()),
            ("DB_POOL_MAX".into(), "10".into()),
        ]);
        if let Some(r) = &self.redis_url {
            vars.insert("REDIS_URL".into(), r.clone());
        }
        for (k, v) in extra {
            vars.insert((*k).into(), (*v).into());
        }
        Config::from_lookup(|k| vars.get(k).cloned()).expect("test config")
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if let Some((server, name)) = self.drop_pg.take() {
            // Best effort, off the test's runtime: a leftover database only costs disk.
            let _ = std::thread::spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
                rt.block_on(async {
                    use sqlx::Connection;
                    if let Ok(mut conn) = sqlx::PgConnection::connect(&server).await {
                        let _ =
                            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
                                .execute(&mut conn)
                                .await;
                    }
                });
            })
            .join();
        }
    }
}

/// The migrated database every test database is copied from: on PostgreSQL a database
/// (`CREATE DATABASE … TEMPLATE`), on SQLite a file. It is made once for a build of the tests
/// (its name carries the test binary's time and the migrations' names), so later runs of the
/// same build reuse it; a new build's replaces the older ones. Nobody connects to it once made,
/// as PostgreSQL requires of a template.
async fn template() -> &'static str {
    static TEMPLATE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    TEMPLATE.get_or_init(make_template).await
}

async fn make_template() -> String {
    use std::hash::{Hash, Hasher};

    use migration::MigratorTrait;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let built = std::env::current_exe().and_then(std::fs::metadata).and_then(|m| m.modified()).ok();
    built.hash(&mut hasher);
    migration::Migrator::migrations().iter().for_each(|m| m.name().hash(&mut hasher));
    let stamp = format!("{:016x}", hasher.finish());
    let migrate = |url: String| async move {
        let conn = sea_orm::Database::connect(&url).await.expect("connect to the template");
        migration::Migrator::up(&conn, None).await.expect("migrate the template");
        conn.close().await.expect("close the template");
    };
    match backend() {
        Backend::Sqlite => {
            let path = std::env::temp_dir().join(format!("cbt-template-{stamp}.sqlite3"));
            if !path.exists() {
                // Made under a name of its own, then renamed: another test process may be at it too.
                let building = std::env::temp_dir().join(format!("cbt-building-{}.sqlite3", uuid::Uuid::new_v4()));
                migrate(format!("sqlite://{}?mode=rwc", building.display())).await;
                std::fs::rename(&building, &path).expect("name the template");
            }
            path.display().to_string()
        }
        Backend::Postgres { server_url, .. } => {
            use sqlx::Connection;
            let name = format!("cbt_template_{stamp}");
            let mut conn = sqlx::PgConnection::connect(&server_url).await.expect("connect to DATABASE_URL");
            let run = |sql: String| sqlx::query(sqlx::AssertSqlSafe(sql));
            let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
                .bind(&name)
                .fetch_optional(&mut conn)
                .await
                .expect("look for the template");
            if exists.is_none() {
                let building = format!("cbt_building_{}", uuid::Uuid::new_v4().simple());
                run(format!("CREATE DATABASE {building}")).execute(&mut conn).await.expect("create the template");
                migrate(replace_db_name(&server_url, &building)).await;
                if run(format!("ALTER DATABASE {building} RENAME TO {name}")).execute(&mut conn).await.is_err() {
                    // Another test process named its own first.
                    let _ = run(format!("DROP DATABASE IF EXISTS {building}")).execute(&mut conn).await;
                }
                // Older builds' templates (and copies a killed run left half made).
                let stale: Vec<String> = sqlx::query_scalar(
                    "SELECT datname FROM pg_database WHERE datname LIKE 'cbt\\_template\\_%' AND datname <> $1",
                )
                .bind(&name)
                .fetch_all(&mut conn)
                .await
                .unwrap_or_default();
                for old in stale {
                    let _ = run(format!("DROP DATABASE IF EXISTS {old}")).execute(&mut conn).await;
                }
            }
            let _ = conn.close().await;
            name
        }
    }
}

fn replace_db_name(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match base.rfind('/') {
        Some(i) if i > "postgres://".len() => &base[..i],
        _ => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// A running server and a client for it.
pub(crate) struct TestApp {
    /// `http://127.0.0.1:PORT`.
    pub(crate) address: String,
    /// The bound port.
    pub(crate) port: u16,
    /// The server's pool (for statement counts).
    pub(crate) db: Db,
    /// The HTTP client.
    pub(crate) client: reqwest::Client,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    /// The task serving (`None` once stopped).
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// The server's own runtime (`None` once shut down).
    runtime: Option<tokio::runtime::Runtime>,
    /// What the server logged.
    log: ServerLog,
}

impl TestApp {
    /// Starts a server on a fresh database.
    pub(crate) async fn spawn() -> (Self, TestDatabase) {
        let database = TestDatabase::new().await;
        let app = Self::spawn_on(&database, &[]).await;
        (app, database)
    }

    /// Starts a server on `database` (several servers may share one), with extra settings.
    pub(crate) async fn spawn_on(database: &TestDatabase, extra: &[(&str, &str)]) -> Self {
        let log = ServerLog::default();
        let runtime = log.runtime();
        let built = runtime.spawn(Application::build(database.config(extra))).await;
        let app = match built {
            Ok(Ok(app)) => app,
            failed => {
                runtime.shutdown_background();
                log.print("a test server that did not start");
                match failed {
                    Ok(Err(e)) => panic!("application builds: {e}"),
                    _ => panic!("application builds: the start-up task panicked"),
                }
            }
        };
        let port = app.port();
        let db = app.db().clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = runtime.spawn(app.run_until_stopped(async {
            let _ = rx.await;
        }));
        Self {
            address: format!("http://127.0.0.1:{port}"),
            port,
            db,
            client: reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("client"),
            shutdown: Some(tx),
            server: Some(server),
            runtime: Some(runtime),
            log,
        }
    }

    /// Stops the server cleanly, as SIGTERM does, and waits until it has stopped (its
    /// background tasks included).
    pub(crate) async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            let stopped = tokio::time::timeout(Duration::from_secs(60), server).await;
            assert!(matches!(stopped, Ok(Ok(Ok(())))), "the server stops cleanly: {stopped:?}");
        }
    }

    /// POSTs one operation; returns the status and the JSON body.
    pub(crate) async fn post(&self, token: Option<&str>, query: &str, variables: Value) -> (u16, Value) {
        self.post_raw(token, json!({ "query": query, "variables": variables })).await
    }

    /// POSTs any JSON body.
    pub(crate) async fn post_raw(&self, token: Option<&str>, body: Value) -> (u16, Value) {
        let mut req = self.client.post(format!("{}/graphql", self.address)).json(&body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("request sent");
        let status = resp.status().as_u16();
        let body = resp.json::<Value>().await.unwrap_or(Value::Null);
        (status, body)
    }

    /// POSTs one operation and returns `data`, failing the test on any error.
    pub(crate) async fn gql(&self, token: Option<&str>, query: &str, variables: Value) -> Value {
        let (status, body) = self.post(token, query, variables).await;
        assert!(status == 200 && body.get("errors").is_none(), "unexpected answer {status}: {body}");
        body["data"].clone()
    }

    /// POSTs one operation expecting a top-level error; returns its `extensions.code`.
    pub(crate) async fn error_code(&self, token: Option<&str>, query: &str, variables: Value) -> String {
        let (_, body) = self.post(token, query, variables).await;
        body["errors"][0]["extensions"]["code"].as_str().unwrap_or_else(|| panic!("no error code in {body}")).to_owned()
    }

    /// Creates a doctor (as admin) and returns its id.
    pub(crate) async fn create_doctor(&self, timezone: &str) -> String {
        let data = self
            .gql(
                Some(&admin()),
                "mutation($tz:String){createDoctor(input:{name:\"Dr Test\",specialty:\"general\",timezone:$tz}){id}}",
                json!({ "tz": timezone }),
            )
            .await;
        data["createDoctor"]["id"].as_str().expect("doctor id").to_owned()
    }

    /// Publishes a schedule (as admin) and returns the slot ids, by start.
    pub(crate) async fn publish(
        &self,
        doctor_id: &str,
        date: &str,
        start: &str,
        end: &str,
        minutes: i32,
        capacity: i32,
    ) -> Vec<String> {
        let data = self
            .gql(
                Some(&admin()),
                "mutation($in:PublishScheduleInput!){publishSchedule(input:$in){created existing slots{id}}}",
                json!({ "in": { "doctorId": doctor_id, "date": date, "startTime": start, "endTime": end,
                                "slotMinutes": minutes, "capacity": capacity } }),
            )
            .await;
        data["publishSchedule"]["slots"]
            .as_array()
            .expect("slots")
            .iter()
            .map(|s| s["id"].as_str().expect("id").to_owned())
            .collect()
    }

    /// A doctor with one 15-minute slot of this capacity tomorrow; returns (doctor id, slot id).
    /// Each call takes the next quarter hour of the day (00:00, 00:15, …), so one patient may
    /// book the slots of several calls without them overlapping.
    pub(crate) async fn doctor_with_slot(&self, capacity: i32) -> (String, String) {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let start = (NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 96) * 15;
        let doctor = self.create_doctor("UTC").await;
        let slots = self.publish(&doctor, &tomorrow(), &clock(start), &clock(start + 15), 15, capacity).await;
        (doctor, slots[0].clone())
    }

    /// Books as `token`; returns the `bookAppointment` payload.
    pub(crate) async fn book(&self, token: &str, slot: &str, key: &str, patient: Option<&str>) -> Value {
        let data = self.gql(Some(token), BOOK, json!({ "s": slot, "k": key, "p": patient })).await;
        data["bookAppointment"].clone()
    }

    /// Cancels as `token`; returns the `cancelAppointment` payload.
    pub(crate) async fn cancel(&self, token: &str, id: &str) -> Value {
        let data = self
            .gql(Some(token), "mutation($id:ID!){cancelAppointment(id:$id){appointment{id status cancelledAt} cancelled userErrors{code field}}}", json!({ "id": id }))
            .await;
        data["cancelAppointment"].clone()
    }

    /// A slot's `bookedCount`, `capacity`, `available` and `version`.
    pub(crate) async fn slot(&self, id: &str) -> Value {
        self.gql(None, "query($id:ID!){slot(id:$id){bookedCount capacity available version}}", json!({ "id": id }))
            .await["slot"]
            .clone()
    }

    /// Statements run by the server's pool so far.
    pub(crate) fn statements(&self) -> u64 {
        self.db.statements_executed()
    }

    /// Checks, in the database, that every slot's `booked_count` equals the active appointments
    /// taking a seat in it and stays within capacity.
    pub(crate) async fn assert_counts_consistent(&self) {
        use sea_orm::{ConnectionTrait, Statement};
        // A seat is taken by each appointment in a seat-holding status (the lifecycle table's:
        // HELD, BOOKED and the desk's) in its first slot and, for a longer one, in each of its
        // further slots.
        let seated = clinic_booking::model::AppointmentStatus::sql_list(|r| r.holds_seat);
        let sql = format!(
            "SELECT COUNT(*) AS bad FROM time_slot s \
             WHERE s.booked_count > s.capacity OR s.booked_count < 0 OR s.booked_count <> \
             (SELECT COUNT(*) FROM appointment a WHERE a.slot_id = s.id AND a.status IN {seated}) + \
             (SELECT COUNT(*) FROM appointment_slot x JOIN appointment a ON a.id = x.appointment_id \
              WHERE x.slot_id = s.id AND a.status IN {seated})"
        );
        let conn = self.db.conn();
        let row = conn
            .query_one_raw(Statement::from_string(conn.get_database_backend(), sql))
            .await
            .expect("consistency query")
            .expect("a row");
        let bad: i64 = row.try_get("", "bad").expect("bad column");
        assert_eq!(bad, 0, "slots whose booked_count differs from their BOOKED appointments");
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        // Not `drop`: dropping a runtime waits for its tasks, which may not block in async code.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        if std::thread::panicking() {
            self.log.print(&format!("the test server at {}", self.address));
        }
    }
}

/// The log of one test server: its runtime's threads write their `tracing` events here.
#[derive(Clone, Default)]
struct ServerLog {
    lines: Arc<Mutex<LogLines>>,
}

#[derive(Default)]
struct LogLines {
    text: Vec<u8>,
    /// Bytes dropped from the front to stay under [`LOG_LIMIT`].
    dropped: usize,
}

/// Most bytes of log kept per server (the latest ones).
const LOG_LIMIT: usize = 8 << 20;

impl ServerLog {
    /// A runtime whose threads log into this buffer: `clinic_booking` at debug level,
    /// everything else from warnings up.
    fn runtime(&self) -> tokio::runtime::Runtime {
        use tracing_subscriber::layer::SubscriberExt;
        // The service's OpenTelemetry layer, as `telemetry::init` installs it: each server
        // exports its own spans (to its own collector, when a test gives it one).
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::EnvFilter::new("warn,clinic_booking=debug"))
            .with(tracing_subscriber::fmt::layer().with_ansi(false).with_thread_names(true).with_writer(self.clone()))
            .with(clinic_booking::telemetry::traces::layer());
        let dispatch = tracing::Dispatch::new(subscriber);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("test-server")
            .enable_all()
            .on_thread_start(move || {
                // The thread's default for as long as it lives.
                std::mem::forget(tracing::dispatcher::set_default(&dispatch));
            })
            .build()
            .expect("test server runtime")
    }

    /// Prints the log (to the test's captured output, shown when it fails).
    fn print(&self, whose: &str) {
        let lines = self.lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let dropped =
            if lines.dropped > 0 { format!(" (its first {} bytes dropped)", lines.dropped) } else { String::new() };
        eprintln!("---- log of {whose}{dropped} ----\n{}---- end of log ----", String::from_utf8_lossy(&lines.text));
    }
}

impl std::io::Write for ServerLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut lines = self.lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        lines.text.extend_from_slice(buf);
        if lines.text.len() > LOG_LIMIT {
            let cut = lines.text.len() - LOG_LIMIT / 2;
            let cut = lines.text[cut..].iter().position(|b| *b == b'\n').map_or(cut, |i| cut + i + 1);
            lines.text.drain(..cut);
            lines.dropped += cut;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for ServerLog {
    type Writer = Self;

    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

/// The booking mutation used by the tests.
pub(crate) const BOOK: &str =
    "mutation($s:ID!,$k:String!,$p:ID){bookAppointment(input:{slotId:$s,idempotencyKey:$k,patientId:$p})\
    {appointment{id status patientId slot{id}} replayed userErrors{code message field}}}";

fn token(role: &str, sub: &str, doctor_id: Option<&str>, exp_in: i64) -> String {
    let claims = Claims {
        sub: sub.into(),
        role: role.into(),
        exp: chrono::Utc::now().timestamp() + exp_in,
        doctor_id: doctor_id.map(str::to_owned),
    };
    TokenIssuer::new(&Secret::new(SECRET)).expect("issuer").issue(&claims).expect("token")
}

/// An admin token.
pub(crate) fn admin() -> String {
    token("admin", "admin-1", None, 3600)
}

/// A patient token for patient `id`.
pub(crate) fn patient(id: u64) -> String {
    token("patient", &id.to_string(), None, 3600)
}

/// A partner token.
pub(crate) fn partner(sub: &str) -> String {
    token("partner", sub, None, 3600)
}

/// A doctor token for doctor `doctor_id`.
pub(crate) fn doctor(doctor_id: &str) -> String {
    token("doctor", &format!("doc-{doctor_id}"), Some(doctor_id), 3600)
}

/// A token signed with our secret but already expired.
pub(crate) fn expired_admin() -> String {
    token("admin", "admin-1", None, -60)
}

/// `HH:MM` of a minute of the day, `24:00` for its end.
pub(crate) fn clock(minute: u32) -> String {
    format!("{:02}:{:02}", minute / 60, minute % 60)
}

/// Tomorrow's date (UTC), `YYYY-MM-DD`.
pub(crate) fn tomorrow() -> String {
    (chrono::Utc::now().date_naive() + chrono::Days::new(1)).format("%Y-%m-%d").to_string()
}

/// The `userErrors[0].code` of a payload, if any.
pub(crate) fn user_error(payload: &Value) -> Option<&str> {
    payload["userErrors"][0]["code"].as_str()
}

/// Whether a test that needs an external tool should skip: `false` when the tool is there.
/// When it is missing, prints one line and returns `true`, unless `CLINIC_REQUIRE_EXTERNAL_TESTS=1`
/// (set by `.ci/run`, which installs the tools), where a missing tool fails the test.
pub(crate) fn skip_without(tool: &str, present: bool) -> bool {
    if present {
        return false;
    }
    assert!(
        std::env::var("CLINIC_REQUIRE_EXTERNAL_TESTS").as_deref() != Ok("1"),
        "{tool} is missing, and CLINIC_REQUIRE_EXTERNAL_TESTS=1 requires it"
    );
    println!("skipped: {tool} is missing (CLINIC_REQUIRE_EXTERNAL_TESTS=1 makes this a failure)");
    true
}
