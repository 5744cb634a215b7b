//! Fan-out benchmark of live availability: opens N WebSocket subscribers to one server, makes a
//! booking (then a cancel, then a booking again), and prints how long until all N have each
//! change (p50/p99/max) and the server's memory per subscriber.
//!
//! ```text
//! cargo build --release --bin clinic-booking --example fanout_bench
//! ulimit -n 200000   # two descriptors per subscriber on this machine (client and server)
//! target/release/examples/fanout_bench 1000 5000 20000
//! ```
//!
//! Each N runs against a fresh server process (`target/release/clinic-booking`, next to this
//! example's directory) on an empty SQLite database in a temporary directory, without Redis.
//! `BENCH_DATABASE_URL` and `BENCH_REDIS_URL` run it on PostgreSQL and/or through Redis instead.
//! Times are measured from just before the mutation is sent until each client has read the
//! event, so they include the booking itself, the commit, the outbox relay and the fan-out.
//! Client and server share the machine's cores.

use std::{
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use clinic_booking::{
    auth::{Claims, TokenIssuer},
    config::Secret,
};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{Notify, Semaphore};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, protocol::WebSocketConfig, Message};

const SECRET: &str = "fanout-bench-secret-0123456789abcdef";
/// Connections being opened at once.
const OPENING: usize = 256;
/// Changes made once every subscriber has its snapshot (`BENCH_ROUNDS` to change): a booking,
/// then alternately a cancel and a booking again.
const ROUNDS: usize = 3;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().context("arguments are subscriber counts"))
        .collect::<Result<_, _>>()?;
    let sizes = if sizes.is_empty() { vec![1000] } else { sizes };
    println!("open-files limit: {}", open_files_limit().unwrap_or_else(|| "unknown".into()));
    for n in sizes {
        run(n).await?;
    }
    Ok(())
}

/// One server process for one run.
struct Server {
    child: Child,
    base: String,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let exe = std::env::current_exe()?;
        let bin = exe
            .parent()
            .and_then(|examples| examples.parent())
            .map(|profile| profile.join("clinic-booking"))
            .context("cannot locate the target directory")?;
        let database = std::env::var("BENCH_DATABASE_URL")
            .unwrap_or_else(|_| format!("sqlite://{}", dir.path().join("bench.sqlite3").display()));
        let mut cmd = Command::new(&bin);
        cmd.env_remove("REDIS_URL")
            .env("DATABASE_URL", database)
            .env("BIND_ADDR", format!("127.0.0.1:{port}"))
            .env("DATA_DIR", dir.path())
            .env("JWT_SECRET", SECRET)
            .env("RATE_LIMIT_BOOKINGS", "0")
            .env("REDIS_KEY_PREFIX", format!("fanout-bench-{port}"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null());
        // `BENCH_SERVER_LOG=path` keeps the server's log (warnings and errors) for a look after the run.
        if let Ok(path) = std::env::var("BENCH_SERVER_LOG") {
            cmd.stdout(std::fs::File::create(path)?);
        }
        if let Ok(redis) = std::env::var("BENCH_REDIS_URL") {
            cmd.env("REDIS_URL", redis);
        }
        let child = cmd.spawn().with_context(|| format!("cannot start {} (build it with --release)", bin.display()))?;
        let server = Self { child, base: format!("http://127.0.0.1:{port}"), port, _dir: dir };
        let client = reqwest::Client::new();
        for _ in 0..200 {
            if client.get(format!("{}/healthz", server.base)).send().await.is_ok() {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("the server did not come up")
    }

    /// Resident memory of the server, in KiB.
    fn rss_kib(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("no VmRSS")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn token(role: &str, sub: &str) -> anyhow::Result<String> {
    let claims =
        Claims { sub: sub.into(), role: role.into(), exp: chrono::Utc::now().timestamp() + 3600, doctor_id: None };
    Ok(TokenIssuer::new(&Secret::new(SECRET))?.issue(&claims)?)
}

async fn gql(client: &reqwest::Client, base: &str, token: &str, query: &str, vars: Value) -> anyhow::Result<Value> {
    let body: Value = client
        .post(format!("{base}/graphql"))
        .bearer_auth(token)
        .json(&json!({ "query": query, "variables": vars }))
        .send()
        .await?
        .json()
        .await?;
    if body.get("errors").is_some() {
        bail!("GraphQL error: {body}");
    }
    Ok(body["data"].clone())
}

/// When each subscriber got the current round's event: one slot per subscriber, written by its
/// task without any shared lock (the harness must cost the machine as little as possible).
struct Arrivals {
    base: Instant,
    at: Vec<AtomicU64>,
    count: AtomicUsize,
    target: AtomicUsize,
    all_in: Notify,
}

impl Arrivals {
    fn new(n: usize) -> Self {
        Self {
            base: Instant::now(),
            at: (0..n).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicUsize::new(0),
            target: AtomicUsize::new(usize::MAX),
            all_in: Notify::new(),
        }
    }

    /// Subscriber `i` got the event now.
    fn record(&self, i: usize) {
        let nanos = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if let Some(slot) = self.at.get(i) {
            slot.store(nanos, Ordering::Relaxed);
        }
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.target.load(Ordering::Acquire) {
            self.all_in.notify_one();
        }
    }

    /// Starts a round; returns its start.
    fn start_round(&self) -> Instant {
        self.count.store(0, Ordering::Release);
        Instant::now()
    }

    /// Waits (at most a minute) until `expected` subscribers have the event; returns the
    /// arrival times seen since `t0`.
    async fn wait(&self, t0: Instant, expected: usize) -> Vec<Instant> {
        self.target.store(expected, Ordering::Release);
        // A permit left by an earlier round only causes one more look at the count.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while self.count.load(Ordering::Acquire) < expected {
            if tokio::time::timeout_at(deadline, self.all_in.notified()).await.is_err() {
                break;
            }
        }
        self.target.store(usize::MAX, Ordering::Release);
        let since = t0.saturating_duration_since(self.base);
        self.at
            .iter()
            .map(|a| self.base + Duration::from_nanos(a.load(Ordering::Relaxed)))
            .filter(|at| at.saturating_duration_since(self.base) >= since)
            .collect()
    }
}

/// One subscriber: connects, subscribes, reports when its snapshot arrived, then reports the
/// arrival time of every further event.
async fn subscriber(
    port: u16,
    doctor: String,
    opening: Arc<Semaphore>,
    ready: Arc<(AtomicUsize, Notify)>,
    arrivals: Arc<Arrivals>,
    index: usize,
) -> anyhow::Result<()> {
    // Held while opening only: at most OPENING handshakes at once.
    let mut permit = Some(opening.acquire_owned().await?);
    let mut req = format!("ws://127.0.0.1:{port}/graphql/ws").into_client_request()?;
    req.headers_mut().insert("Sec-WebSocket-Protocol", "graphql-transport-ws".parse()?);
    // A small read buffer: the client process holds as many connections as the server.
    let config = WebSocketConfig::default().read_buffer_size(4096);
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(req, Some(config), false).await?;
    ws.send(Message::text(json!({ "type": "connection_init", "payload": {} }).to_string())).await?;
    let subscribe = json!({ "type": "subscribe", "id": "1", "payload": {
        "query": "subscription($d:ID!){slotAvailability(doctorId:$d){slotId bookedCount available version}}",
        "variables": { "d": doctor } } });
    let mut snapshot = false;
    while let Some(msg) = ws.next().await {
        let Message::Text(text) = msg? else { continue };
        if text.contains("\"connection_ack\"") {
            ws.send(Message::text(subscribe.to_string())).await?;
        } else if text.contains("\"next\"") {
            if snapshot {
                arrivals.record(index);
            } else {
                snapshot = true;
                permit.take();
                ready.0.fetch_add(1, Ordering::SeqCst);
                ready.1.notify_one();
            }
        } else {
            bail!("unexpected message: {text}");
        }
    }
    Ok(())
}

async fn run(n: usize) -> anyhow::Result<()> {
    println!("\n== {n} subscribers ==");
    let server = Server::start().await?;
    println!("server pid {}", server.child.id());
    let http = reqwest::Client::new();
    let admin = token("admin", "bench-admin")?;
    let doctor = gql(&http, &server.base, &admin, "mutation{createDoctor(input:{name:\"Dr Bench\"}){id}}", json!({}))
        .await?["createDoctor"]["id"]
        .as_str()
        .context("doctor id")?
        .to_owned();
    let date = (chrono::Utc::now().date_naive() + chrono::Days::new(1)).format("%Y-%m-%d").to_string();
    let published = gql(
        &http,
        &server.base,
        &admin,
        "mutation($in:PublishScheduleInput!){publishSchedule(input:$in){slots{id}}}",
        json!({ "in": { "doctorId": doctor, "date": date, "startTime": "09:00", "endTime": "09:15", "capacity": 10 } }),
    )
    .await?;
    let slot = published["publishSchedule"]["slots"][0]["id"].as_str().context("slot id")?.to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before = server.rss_kib()?;

    let opening = Arc::new(Semaphore::new(OPENING));
    let ready = Arc::new((AtomicUsize::new(0), Notify::new()));
    let failed = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let arrivals = Arc::new(Arrivals::new(n));
    let started = Instant::now();
    for index in 0..n {
        let (doctor, opening, ready, tx, failed, finished) =
            (doctor.clone(), opening.clone(), ready.clone(), arrivals.clone(), failed.clone(), finished.clone());
        let port = server.port;
        tokio::spawn(async move {
            if let Err(e) = subscriber(port, doctor, opening, ready.clone(), tx, index).await {
                // Connections reset when the run ends and the server is stopped are not failures.
                if finished.load(Ordering::SeqCst) {
                    return;
                }
                if failed.fetch_add(1, Ordering::SeqCst) < 3 {
                    eprintln!("subscriber failed: {e:#}");
                }
                ready.1.notify_one();
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while ready.0.load(Ordering::SeqCst) + failed.load(Ordering::SeqCst) < n {
        if Instant::now() > deadline {
            bail!("only {} of {n} subscribed", ready.0.load(Ordering::SeqCst));
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), ready.1.notified()).await;
    }
    let subscribed = ready.0.load(Ordering::SeqCst);
    println!(
        "subscribed: {subscribed} of {n} in {:.1} s ({} failed)",
        started.elapsed().as_secs_f64(),
        failed.load(Ordering::SeqCst)
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_after = server.rss_kib()?;
    println!(
        "server RSS: {:.1} MiB before, {:.1} MiB with the subscribers: {:.1} KiB per subscriber",
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0,
        (rss_after.saturating_sub(rss_before)) as f64 / subscribed.max(1) as f64
    );

    let patient = token("patient", "42")?;
    let mut appointment = String::new();
    let rounds = std::env::var("BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(ROUNDS);
    for round in 0..rounds {
        let what = if round % 2 == 0 { "book" } else { "cancel" };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let cpu0 = (cpu_ms(server.child.id()), cpu_ms(std::process::id()));
        let t0 = arrivals.start_round();
        let data = match what {
            "cancel" => {
                gql(
                    &http,
                    &server.base,
                    &patient,
                    "mutation($id:ID!){cancelAppointment(id:$id){cancelled}}",
                    json!({ "id": appointment }),
                )
                .await?
            }
            _ => {
                gql(
                    &http,
                    &server.base,
                    &patient,
                    "mutation($s:ID!,$k:String!){bookAppointment(input:{slotId:$s,idempotencyKey:$k}){appointment{id} userErrors{code}}}",
                    // Keys unique to this run: a PostgreSQL database may be reused across runs.
                    json!({ "s": slot, "k": format!("{slot}-round-{round}") }),
                )
                .await?
            }
        };
        let answered = t0.elapsed();
        if let Some(id) = data["bookAppointment"]["appointment"]["id"].as_str() {
            appointment = id.to_owned();
        }
        let refused = &data["bookAppointment"]["userErrors"][0];
        if !refused.is_null() || data["cancelAppointment"]["cancelled"] == json!(false) {
            bail!("the {what} changed nothing: {data}");
        }
        let received = arrivals.wait(t0, subscribed).await;
        let mut latencies: Vec<Duration> = received.iter().map(|at| at.saturating_duration_since(t0)).collect();
        let cpu1 = (cpu_ms(server.child.id()), cpu_ms(std::process::id()));
        latencies.sort();
        let pct = |p: f64| {
            latencies
                .get(((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1))
                .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
        };
        println!(
            "{what:>6}: answered in {:.1} ms; {} of {subscribed} got the event: p50 {:.1} ms, p99 {:.1} ms, \
             max {:.1} ms; CPU server {} ms, clients {} ms",
            answered.as_secs_f64() * 1000.0,
            latencies.len(),
            pct(0.50),
            pct(0.99),
            pct(1.0),
            cpu1.0.saturating_sub(cpu0.0),
            cpu1.1.saturating_sub(cpu0.1),
        );
    }
    println!("server RSS after the events: {:.1} MiB", server.rss_kib()? as f64 / 1024.0);
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

/// CPU time (user + system) a process has used, in milliseconds (0 when unreadable).
fn cpu_ms(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    // USER_HZ is 100 on Linux.
    ticks * 10
}

fn open_files_limit() -> Option<String> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    Some(line.split_whitespace().nth(3)?.to_owned())
}
