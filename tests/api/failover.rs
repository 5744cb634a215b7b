//! A database that fails over (contract part four): a PostgreSQL primary and a standby started
//! by the test, the service's `DATABASE_URL` on a TCP proxy that the test switches to the
//! promoted standby (as HAProxy does on Patroni's `/primary`), and the standby's replication
//! link through a second proxy that the test can cut (a network partition between the two).
//!
//! - Under a booking burst the primary is killed (`kill -9` of all its processes), the standby
//!   promoted, the proxy switched: every acknowledged booking is on the promoted server, one
//!   appointment per key, the seat invariant holds, answers in the gap are `UNAVAILABLE`, and
//!   bookings succeed again within 10 s.
//! - With the replication link cut a synchronous commit cannot complete: the booking answers
//!   `UNAVAILABLE`, and a same-key retry is not acknowledged until the standby holds the row.
//! - The negative control, an asynchronous standby, shows the checker catching acknowledged
//!   bookings that the promoted server lacks, so the first test can fail.
//!
//! PostgreSQL runs (skipped on SQLite), with its server programs from
//! `/usr/lib/postgresql/*/bin` (skipped with a message when missing, unless
//! `CLINIC_REQUIRE_EXTERNAL_TESTS=1`). PostgreSQL refuses to run as root: as root the programs
//! run as the `postgres` user. A failing test prints the servers' logs.

use std::{
    collections::HashMap,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use serde_json::json;
use sqlx::{Connection, PgConnection};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
};

use crate::{
    backend::{backend, Backend},
    helpers::{partner, skip_without, TestApp, TestDatabase, BOOK},
};

/// The service's bound on any wait for the database, short so the tests stay short.
const UNAVAILABLE_MS: u64 = 2000;

/// The newest `/usr/lib/postgresql/*/bin` with the server programs.
fn pg_bin() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            ["postgres", "initdb", "pg_basebackup"].iter().all(|p| bin.join(p).exists()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// The server programs, or `None` (with a message) when the test skips.
fn prerequisites() -> Option<PathBuf> {
    if !matches!(backend(), Backend::Postgres { .. }) {
        println!("skipped: PostgreSQL only (a primary and a synchronous standby)");
        return None;
    }
    let bin = pg_bin();
    if skip_without("the PostgreSQL server programs (/usr/lib/postgresql/*/bin)", bin.is_some()) {
        return None;
    }
    bin
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A TCP proxy to a backend the test chooses: switching it (or cutting it, `None`) closes every
/// connection it carries, and a connection that finds no backend is closed at once.
struct Proxy {
    port: u16,
    backend: watch::Sender<Option<u16>>,
}

impl Proxy {
    async fn start(to: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let backend = watch::Sender::new(Some(to));
        let targets = backend.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut switched = targets.subscribe();
                let Some(target) = *switched.borrow_and_update() else { continue };
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", target)).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = switched.changed() => {}
                    }
                });
            }
        });
        Self { port, backend }
    }

    /// Leads new connections to `to` (nowhere: `None`) and cuts the current ones.
    fn switch(&self, to: Option<u16>) {
        self.backend.send_replace(to);
    }
}

/// A primary and a standby (synchronous or not) in a temporary directory, the standby's
/// replication through a proxy; their logs printed when the test fails.
struct Pair {
    bin: PathBuf,
    dir: tempfile::TempDir,
    as_postgres: bool,
    primary: Server,
    standby: Server,
    /// The standby's replication link.
    link: Proxy,
}

/// One running server.
struct Server {
    name: &'static str,
    port: u16,
    child: Option<Child>,
}

impl Pair {
    /// Starts the primary, copies it into the standby, starts that, and waits until the
    /// standby streams (and is the synchronous one, when `synchronous`).
    async fn start(bin: PathBuf, synchronous: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let as_postgres = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0");
        if as_postgres {
            let owned = Command::new("chown").arg("postgres:").arg(dir.path()).status().unwrap();
            assert!(owned.success(), "chown the test directory to postgres");
        }
        let mut pair = Self {
            bin,
            dir,
            as_postgres,
            primary: Server { name: "primary", port: free_port(), child: None },
            standby: Server { name: "standby", port: free_port(), child: None },
            link: Proxy::start(0).await,
        };
        pair.link.switch(None);
        pair.run("initdb", &["-D", "primary", "-U", "postgres", "--auth=trust", "-N"]);
        let names = if synchronous { "standby" } else { "" };
        pair.primary.child =
            Some(pair.postgres("primary", pair.primary.port, &[format!("synchronous_standby_names={names}")]));
        wait_ready(pair.primary.port).await;
        pair.link.switch(Some(pair.primary.port));
        let port = pair.primary.port.to_string();
        pair.run(
            "pg_basebackup",
            &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-D", "standby", "-R", "-X", "stream", "-c", "fast"],
        );
        let conninfo =
            format!("primary_conninfo=host=127.0.0.1 port={} user=postgres application_name=standby", pair.link.port);
        pair.standby.child =
            Some(pair.postgres("standby", pair.standby.port, &[conninfo, "wal_retrieve_retry_interval=200ms".into()]));
        wait_ready(pair.standby.port).await;
        pair.wait_streaming(synchronous).await;
        pair
    }

    /// A command of the server programs, run as `postgres` when the test runs as root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        command.current_dir(self.dir.path());
        command
    }

    /// Runs a program to its end; fails the test when it fails.
    fn run(&self, program: &str, args: &[&str]) {
        let out = self.command(program).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts `postgres` on the data directory `name`, logging into `name.log`, in a process
    /// group of its own (so that `kill -9` takes all its processes, as a machine's death does).
    fn postgres(&self, name: &str, port: u16, settings: &[String]) -> Child {
        use std::os::unix::process::CommandExt;
        let log = std::fs::File::create(self.log_path(name)).unwrap();
        let mut command = self.command("postgres");
        command.args(["-D", name, "-p", &port.to_string()]);
        let socket_dir = format!("unix_socket_directories={}", self.dir.path().display());
        let fixed = [
            "listen_addresses=127.0.0.1",
            "fsync=off",
            "shared_buffers=32MB",
            "max_connections=60",
            "wal_level=replica",
            "max_wal_senders=4",
            &socket_dir,
        ];
        for setting in fixed.iter().map(|s| s.to_string()).chain(settings.iter().cloned()) {
            command.arg("-c").arg(setting);
        }
        command.stdout(Stdio::null()).stderr(log.try_clone().unwrap()).process_group(0).spawn().unwrap()
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// Waits until the standby streams from the primary (as the synchronous standby, when
    /// `synchronous`).
    async fn wait_streaming(&self, synchronous: bool) {
        let mut conn = connect(self.primary.port).await.unwrap();
        let state = if synchronous { "sync" } else { "async" };
        for _ in 0..300 {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1",
            )
            .bind(state)
            .fetch_one(&mut conn)
            .await
            .unwrap();
            if n == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the standby never streamed ({state})");
    }

    /// Waits until the standby has replayed everything the primary wrote so far.
    async fn wait_replayed(&self) {
        let mut primary = connect(self.primary.port).await.unwrap();
        let lsn: String =
            sqlx::query_scalar("SELECT pg_current_wal_lsn()::text").fetch_one(&mut primary).await.unwrap();
        let mut standby = connect(self.standby.port).await.unwrap();
        for _ in 0..300 {
            let done: bool = sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn")
                .bind(&lsn)
                .fetch_one(&mut standby)
                .await
                .unwrap();
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the standby never replayed up to {lsn}");
    }

    /// `kill -9` of every process of the primary.
    fn kill_primary(&mut self) {
        if let Some(mut child) = self.primary.child.take() {
            let _ = Command::new("kill").args(["-9", "--", &format!("-{}", child.id())]).status();
            let _ = child.wait();
        }
    }

    /// Promotes the standby and waits until it is a primary.
    async fn promote(&self) {
        let mut conn = connect(self.standby.port).await.unwrap();
        let promoted: bool = sqlx::query_scalar("SELECT pg_promote(true, 30)").fetch_one(&mut conn).await.unwrap();
        assert!(promoted, "the standby was promoted");
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for server in [&mut self.primary, &mut self.standby] {
            if let Some(mut child) = server.child.take() {
                let _ = Command::new("kill").args(["-9", "--", &format!("-{}", child.id())]).status();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() {
            for server in [&self.primary, &self.standby] {
                let log = std::fs::read_to_string(self.log_path(server.name)).unwrap_or_default();
                eprintln!("----- {} (port {}) log -----\n{log}", server.name, server.port);
            }
        }
    }
}

/// A connection straight to the server on `port`.
async fn connect(port: u16) -> Result<PgConnection, sqlx::Error> {
    PgConnection::connect(&format!("postgres://postgres@127.0.0.1:{port}/postgres")).await
}

/// Waits until the server on `port` takes connections.
async fn wait_ready(port: u16) {
    for _ in 0..300 {
        if let Ok(conn) = connect(port).await {
            let _ = conn.close().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the server on port {port} never took connections");
}

/// A booking the service answered as done.
#[derive(Clone, Debug)]
struct Ack {
    key: String,
    id: String,
    at: Instant,
}

/// The service's `DATABASE_URL` on the proxy, and a server on it.
async fn service_on(proxy: &Proxy) -> (TestApp, TestDatabase) {
    let database = TestDatabase::at(format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port));
    let timeout = UNAVAILABLE_MS.to_string();
    // No rate limit: the clients here retry every 100 ms, where real ones wait retryAfterSeconds.
    let app =
        TestApp::spawn_on(&database, &[("DB_UNAVAILABLE_TIMEOUT_MS", &timeout), ("RATE_LIMIT_BOOKINGS", "0")]).await;
    (app, database)
}

/// One booking attempt: `Ok(ack)` when answered as done, else `Err(code)` (the top-level error
/// code, or the whole answer when it has none).
async fn book_once(app: &TestApp, slot: &str, key: &str, patient: u64) -> Result<Ack, String> {
    let (status, body) =
        app.post(Some(&partner("clinic-app")), BOOK, json!({ "s": slot, "k": key, "p": patient.to_string() })).await;
    let payload = &body["data"]["bookAppointment"];
    match (status, payload["appointment"]["id"].as_str(), body["errors"][0]["extensions"]["code"].as_str()) {
        (200, Some(id), None) => Ok(Ack { key: key.to_owned(), id: id.to_owned(), at: Instant::now() }),
        (_, _, Some(code)) => Err(code.to_owned()),
        _ => Err(format!("{status}: {body}")),
    }
}

/// The acknowledged bookings the server on `port` lacks (by key and id): what the checker
/// reports as lost.
async fn lost(port: u16, acks: &[Ack]) -> Vec<Ack> {
    let mut conn = connect(port).await.unwrap();
    let rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, idempotency_key FROM appointment").fetch_all(&mut conn).await.unwrap();
    let found: HashMap<String, String> = rows.into_iter().map(|(id, key)| (key, id.to_string())).collect();
    acks.iter().filter(|a| found.get(&a.key) != Some(&a.id)).cloned().collect()
}

/// Keys with more than one appointment on the server on `port`.
async fn duplicated_keys(port: u16) -> i64 {
    let mut conn = connect(port).await.unwrap();
    sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT 1 FROM appointment GROUP BY booked_by, idempotency_key HAVING count(*) > 1) d",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_under_a_burst_loses_no_acknowledged_booking() {
    let Some(bin) = prerequisites() else { return };
    let mut pair = Pair::start(bin, true).await;
    let proxy = Proxy::start(pair.primary.port).await;
    let (app, _database) = service_on(&proxy).await;
    let app = Arc::new(app);
    let (_, slot) = app.doctor_with_slot(100_000).await;

    // Workers book one key after another; a key answered UNAVAILABLE (or OVERLOADED) is retried
    // with the same key until it is acknowledged, as the contract tells clients to.
    const WORKERS: u64 = 6;
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(Vec::<Ack>::new()));
    let wrong = Arc::new(Mutex::new(Vec::<String>::new()));
    let unavailable = Arc::new(Mutex::new(0_u32));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (app, slot, stop, acks, wrong, unavailable) = (
                Arc::clone(&app),
                slot.clone(),
                Arc::clone(&stop),
                Arc::clone(&acks),
                Arc::clone(&wrong),
                Arc::clone(&unavailable),
            );
            tokio::spawn(async move {
                let give_up = Instant::now() + Duration::from_secs(60);
                for n in 0_u64.. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let key = format!("w{w}-{n}");
                    loop {
                        match book_once(&app, &slot, &key, w * 100_000 + n + 1).await {
                            Ok(ack) => {
                                acks.lock().unwrap().push(ack);
                                break;
                            }
                            Err(code) if code == "UNAVAILABLE" || code == "OVERLOADED" => {
                                *unavailable.lock().unwrap() += 1;
                                if Instant::now() > give_up {
                                    wrong.lock().unwrap().push(format!("{key} never acknowledged"));
                                    return;
                                }
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                            Err(other) => {
                                wrong.lock().unwrap().push(format!("{key}: {other}"));
                                return;
                            }
                        }
                    }
                }
            })
        })
        .collect();

    // The burst runs; the primary dies, the standby is promoted, the address leads to it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = acks.lock().unwrap().len();
    assert!(before > 0, "bookings went through before the failover");
    pair.kill_primary();
    let ready = |app: Arc<TestApp>| async move {
        app.client.get(format!("{}/readyz", app.address)).send().await.map_or(0, |r| r.status().as_u16())
    };
    assert_eq!(ready(Arc::clone(&app)).await, 503, "/readyz while no primary answers");
    pair.promote().await;
    proxy.switch(Some(pair.standby.port));
    let switched = Instant::now();

    // Bookings answered again within 10 s of the switch, without a restart.
    let mut again = None;
    while again.is_none() && switched.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        again = acks.lock().unwrap().iter().filter(|a| a.at > switched).map(|a| a.at - switched).min();
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    let wrong = wrong.lock().unwrap().clone();
    assert!(wrong.is_empty(), "answers other than done or UNAVAILABLE/OVERLOADED: {wrong:?}");
    let again = again.expect("bookings answered again after the switch");
    assert_eq!(ready(Arc::clone(&app)).await, 200, "/readyz once the address leads to the new primary");
    assert!(again < Duration::from_secs(10), "the first booking after the switch came {again:?} later");

    // Every acknowledged booking is on the promoted server, once per key, and the seats add up.
    let acks = acks.lock().unwrap().clone();
    let missing = lost(pair.standby.port, &acks).await;
    assert!(missing.is_empty(), "{} of {} acknowledged bookings lost: {missing:?}", missing.len(), acks.len());
    assert_eq!(duplicated_keys(pair.standby.port).await, 0, "one appointment per idempotency key");
    app.assert_counts_consistent().await;
    println!(
        "{} bookings acknowledged ({before} before the failover), {} answers UNAVAILABLE/OVERLOADED, booking again {again:?} after the switch",
        acks.len(),
        unavailable.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_the_standby_never_confirms_is_unavailable_and_its_retry_waits_for_it() {
    let Some(bin) = prerequisites() else { return };
    let pair = Pair::start(bin, true).await;
    let proxy = Proxy::start(pair.primary.port).await;
    let (app, _database) = service_on(&proxy).await;
    let (_, slot) = app.doctor_with_slot(100).await;
    book_once(&app, &slot, "before", 1).await.expect("a booking while the standby confirms");

    // The standby is cut off: no synchronous commit can complete.
    pair.link.switch(None);
    let started = Instant::now();
    let answer = book_once(&app, &slot, "cut", 2).await;
    let waited = started.elapsed();
    assert_eq!(answer.map(|a| a.id), Err("UNAVAILABLE".to_owned()), "the booking waiting for the standby");
    // The bound is the service's; this only checks it held (with room for a loaded machine).
    assert!(waited < Duration::from_millis(UNAVAILABLE_MS) + Duration::from_secs(8), "answered after {waited:?}");

    // The waiting commit ends, committed locally but not on the standby (as when an operator or
    // a failover manager cancels it): the row is visible on the primary.
    let mut primary = connect(pair.primary.port).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
        .execute(&mut primary)
        .await
        .unwrap();
    let mut visible = 0_i64;
    for _ in 0..100 {
        visible = sqlx::query_scalar("SELECT count(*) FROM appointment WHERE idempotency_key = 'cut'")
            .fetch_one(&mut primary)
            .await
            .unwrap();
        if visible == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(visible, 1, "the cut booking is committed on the primary alone");

    // A same-key retry finds the row, but is not acknowledged while the standby lacks it.
    let retry = book_once(&app, &slot, "cut", 2).await;
    assert_eq!(retry.map(|a| a.id), Err("UNAVAILABLE".to_owned()), "a replay the standby does not hold");

    // The standby is back: the retry is acknowledged, and the standby holds the row.
    pair.link.switch(Some(pair.primary.port));
    let mut replayed = None;
    for _ in 0..100 {
        let (_, body) = app.post(Some(&partner("clinic-app")), BOOK, json!({ "s": slot, "k": "cut", "p": "2" })).await;
        if body["data"]["bookAppointment"]["replayed"] == true {
            replayed = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(replayed.is_some(), "the retry is acknowledged once the standby is back");
    let mut standby = connect(pair.standby.port).await.unwrap();
    let on_standby: i64 = sqlx::query_scalar("SELECT count(*) FROM appointment WHERE idempotency_key = 'cut'")
        .fetch_one(&mut standby)
        .await
        .unwrap();
    assert_eq!(on_standby, 1, "the acknowledged replay is on the standby");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_the_lost_acknowledgements_of_an_asynchronous_standby() {
    let Some(bin) = prerequisites() else { return };
    let mut pair = Pair::start(bin, false).await;
    let proxy = Proxy::start(pair.primary.port).await;
    let (app, _database) = service_on(&proxy).await;
    let (_, slot) = app.doctor_with_slot(100).await;

    // The standby has the schema and the slot, then falls behind (its link cut); the primary
    // acknowledges alone, then dies.
    pair.wait_replayed().await;
    pair.link.switch(None);
    let mut acks = Vec::new();
    for n in 0..5 {
        acks.push(book_once(&app, &slot, &format!("async-{n}"), n + 1).await.expect("booked without a standby"));
    }
    pair.kill_primary();
    pair.promote().await;
    proxy.switch(Some(pair.standby.port));

    let missing = lost(pair.standby.port, &acks).await;
    assert_eq!(missing.len(), acks.len(), "the checker reports every acknowledgement the standby never got");
}
