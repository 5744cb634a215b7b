//! `life`: the lifecycle's own figures, each against a running server seeded by `seed`
//! (BENCHMARKS.md, issues 11 and 13):
//!
//! - `hold`: `holdSlot` on a fresh wide set (capacity 2e9, every hold takes a seat), closed loop;
//! - `confirm`: each connection holds a seat, then confirms it, closed loop; both timed;
//! - `cancel`: books `--count` seats of free grid slots, optionally puts `--waiters` patients on
//!   the waitlist of every doctor-day among them, then cancels every booking as fast as
//!   `--connections` allow (with waiters, each cancel offers the seat, as a hold, to the one
//!   who waited longest, in the cancel's transaction);
//! - `expiry`: holds `--count` free grid slots, moves every one of those holds' expiry to the
//!   same second (a benchmark fixture: one `UPDATE`), and times how long the server's expiry
//!   job takes to release them all.
//!
//! Every scenario ends with the invariant check on all slots.

use std::{
    collections::BTreeMap,
    future::Future,
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use clinic_booking::{auth::TokenIssuer, config::Secret};
use rand::seq::SliceRandom;
use serde_json::{json, Value};

use crate::{
    check,
    load::{failed, hot_set, mint, percentile_ms, BOOK_MUTATION, WIDE_CAPACITY},
    seed::Manifest,
};

const HOLD_MUTATION: &str = "mutation($s:ID!,$k:String!,$p:ID!){holdSlot(input:{slotId:$s,\
    idempotencyKey:$k,patientId:$p}){appointment{id} userErrors{code}}}";
const CONFIRM_MUTATION: &str = "mutation($id:ID!){confirmAppointment(id:$id){confirmed userErrors{code}}}";
const CANCEL_MUTATION: &str = "mutation($id:ID!){cancelAppointment(id:$id){cancelled userErrors{code}}}";
const JOIN_MUTATION: &str = "mutation($d:ID!,$t:Date!,$k:String!,$p:ID!){joinWaitlist(input:{doctorId:$d,\
    date:$t,idempotencyKey:$k,patientId:$p}){entry{id} userErrors{code}}}";
/// How long the expiry scenario waits for the last hold to go.
const EXPIRY_DEADLINE: Duration = Duration::from_secs(120);

/// What `life` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LifeScenario {
    /// `holdSlot` on a wide set.
    Hold,
    /// `holdSlot` then `confirmAppointment`, per connection.
    Confirm,
    /// Cancel `--count` bookings (with `--waiters` per doctor-day).
    Cancel,
    /// `--count` holds expiring in the same second.
    Expiry,
}

/// Settings of `life`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct LifeArgs {
    /// The scenario.
    #[arg(long, value_enum)]
    scenario: LifeScenario,
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The server's JWT_SECRET.
    #[arg(long, env = "JWT_SECRET")]
    secret: String,
    /// The manifest written by `seed`.
    #[arg(long, default_value = "loadtest-seed.json")]
    seed: PathBuf,
    /// The server's database (fresh grid slots are chosen there, and the check runs there).
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// Connections (closed loop).
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Seconds of load (hold, confirm).
    #[arg(long, default_value_t = 15)]
    duration: u64,
    /// Bookings to cancel, or holds to expire.
    #[arg(long, default_value_t = 20_000)]
    count: usize,
    /// Cancel: patients waiting on every doctor-day of the cancelled bookings.
    #[arg(long, default_value_t = 0)]
    waiters: usize,
    /// Cancel in random order (default: in booking order, so the connections cancel the seats
    /// of one or two doctor-days at a time, which then queue for the same waitlist).
    #[arg(long)]
    shuffle: bool,
}

/// One operation's latencies (µs) and outcome counts.
type OpRecord = (Vec<u64>, BTreeMap<String, u64>);

/// Latencies and outcomes per operation name.
#[derive(Default)]
struct Recorder {
    ops: Mutex<BTreeMap<&'static str, OpRecord>>,
}

impl Recorder {
    fn record(&self, op: &'static str, started: Instant, outcome: String) {
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let mut ops = self.ops.lock().unwrap_or_else(PoisonError::into_inner);
        let (lat, outcomes) = ops.entry(op).or_default();
        lat.push(us);
        *outcomes.entry(outcome).or_default() += 1;
    }

    /// Prints one line per operation; false when any answer was a 5xx or a transport error.
    fn report(&self, elapsed: Duration) -> bool {
        let mut ops = self.ops.lock().unwrap_or_else(PoisonError::into_inner);
        println!(
            "{:<8} {:>9} {:>11} {:>8} {:>8} {:>8} {:>9}  outcomes",
            "op", "done", "achieved/s", "p50 ms", "p90 ms", "p99 ms", "max ms"
        );
        let mut healthy = true;
        for (name, (lat, outcomes)) in ops.iter_mut() {
            lat.sort_unstable();
            let pct = |p: f64| percentile_ms(lat, p);
            healthy &= !outcomes.keys().any(|k| failed(k));
            let list: Vec<String> = outcomes.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            println!(
                "{name:<8} {:>9} {:>11.1} {:>8.2} {:>8.2} {:>8.2} {:>9.2}  {}",
                lat.len(),
                lat.len() as f64 / elapsed.as_secs_f64(),
                pct(0.5),
                pct(0.9),
                pct(0.99),
                lat.last().copied().unwrap_or(0) as f64 / 1000.0,
                list.join(",")
            );
        }
        ops.clear();
        healthy
    }
}

/// One client and the tokens of a run.
struct Api {
    client: reqwest::Client,
    url: String,
    partner: String,
    recorder: Recorder,
}

impl Api {
    /// Sends one operation as the partner; records it under `op` and returns the payload of
    /// `field` when it carried no user error.
    async fn call(&self, op: &'static str, field: &str, query: &str, variables: Value) -> Option<Value> {
        let started = Instant::now();
        let answer = self
            .client
            .post(&self.url)
            .bearer_auth(&self.partner)
            .json(&json!({ "query": query, "variables": variables }))
            .send()
            .await;
        let (outcome, payload) = match answer {
            Ok(resp) => {
                let status = resp.status().as_u16();
                match resp.json::<Value>().await {
                    Ok(body) => classify(status, field, body),
                    Err(_) => (format!("http_{status}_unparsable"), None),
                }
            }
            Err(_) => ("transport_error".to_owned(), None),
        };
        self.recorder.record(op, started, outcome);
        payload
    }
}

/// `ok` with the payload, `ue_CODE`, `err_CODE` or `http_NNN`.
fn classify(status: u16, field: &str, body: Value) -> (String, Option<Value>) {
    if let Some(code) = body.pointer("/errors/0/extensions/code") {
        return (format!("err_{}", code.as_str().unwrap_or("NOCODE")), None);
    }
    if status != 200 {
        return (format!("http_{status}"), None);
    }
    let payload = &body["data"][field];
    if let Some(code) = payload.pointer("/userErrors/0/code").and_then(Value::as_str) {
        return (format!("ue_{code}"), None);
    }
    ("ok".to_owned(), Some(payload.clone()))
}

/// Runs `op(i)` for i in 0.. on `connections` connections until `total` or `deadline`;
/// returns the time it took.
async fn drive<F, Fut>(connections: usize, total: usize, deadline: Option<Instant>, op: F) -> anyhow::Result<Duration>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..connections.max(1) {
        let (op, next) = (Arc::clone(&op), Arc::clone(&next));
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                op(i).await;
            }
        }));
    }
    for w in workers {
        w.await?;
    }
    Ok(started.elapsed())
}

/// Free grid slots of doctors nobody has booked or waited for yet: (slot, doctor, day).
async fn fresh_grid(pool: &sqlx::PgPool, manifest: &Manifest, count: usize) -> anyhow::Result<Vec<(i64, i64, String)>> {
    let slots: Vec<(i64, i64, String)> = sqlx::query_as(
        "WITH fresh AS (SELECT d, n FROM unnest($1::bigint[]) WITH ORDINALITY AS m(d, n) \
             WHERE NOT EXISTS (SELECT 1 FROM time_slot s WHERE s.doctor_id = m.d AND s.booked_count > 0) \
               AND NOT EXISTS (SELECT 1 FROM waitlist_entry w WHERE w.doctor_id = m.d)) \
         SELECT s.id, s.doctor_id, to_char(s.start_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') \
         FROM fresh JOIN time_slot s ON s.doctor_id = fresh.d AND s.start_at > now() \
         ORDER BY fresh.n DESC, s.start_at LIMIT $2",
    )
    .bind(&manifest.doctors)
    .bind(i64::try_from(count).unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await
    .context("choosing free slots of fresh doctors")?;
    anyhow::ensure!(slots.len() == count, "only {} fresh grid slots left; seed again", slots.len());
    Ok(slots)
}

/// Runs `life`.
pub(crate) async fn run(args: LifeArgs) -> anyhow::Result<bool> {
    let manifest: Manifest = serde_json::from_slice(
        &std::fs::read(&args.seed).with_context(|| format!("reading {} (run `seed` first)", args.seed.display()))?,
    )?;
    let issuer = TokenIssuer::new(&Secret::new(args.secret.clone()))?;
    let admin = mint(&issuer, "900000001", "admin")?;
    let partner = mint(&issuer, "900000002", "partner")?;
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(args.connections)
        .timeout(Duration::from_secs(60))
        .build()?;
    let url = format!("{}/graphql", args.url.trim_end_matches('/'));
    let pool = sqlx::PgPool::connect(&args.database_url).await.context("connecting")?;
    let api = Arc::new(Api { client: client.clone(), url: url.clone(), partner, recorder: Recorder::default() });
    // Patients no earlier run used: the per-patient limit never fires, holds never overlap.
    let base = 1_000_000_000 * (u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0) % 1_000_000);
    let conns = args.connections;
    let mut healthy = true;

    match args.scenario {
        LifeScenario::Hold | LifeScenario::Confirm => {
            let wide = Arc::new(hot_set(&client, &url, &admin, WIDE_CAPACITY).await?);
            let confirm = args.scenario == LifeScenario::Confirm;
            let deadline = Instant::now() + Duration::from_secs(args.duration);
            let a = Arc::clone(&api);
            let elapsed = drive(conns, usize::MAX, Some(deadline), move |i| {
                let (a, wide) = (Arc::clone(&a), Arc::clone(&wide));
                async move {
                    let p = base + i as u64;
                    let vars =
                        json!({ "s": wide[i % wide.len()].to_string(), "k": format!("lh-{p}"), "p": p.to_string() });
                    let held = a.call("hold", "holdSlot", HOLD_MUTATION, vars).await;
                    if let (true, Some(id)) = (confirm, held.as_ref().and_then(|h| h.pointer("/appointment/id"))) {
                        a.call("confirm", "confirmAppointment", CONFIRM_MUTATION, json!({ "id": id })).await;
                    }
                }
            })
            .await?;
            println!("scenario={:?} closed, {conns} connections, {:.1} s", args.scenario, elapsed.as_secs_f64());
            healthy &= api.recorder.report(elapsed);
        }
        LifeScenario::Cancel => {
            let slots = Arc::new(fresh_grid(&pool, &manifest, args.count).await?);
            let booked: Arc<Mutex<Vec<Value>>> = Arc::default();
            let (a, s, b) = (Arc::clone(&api), Arc::clone(&slots), Arc::clone(&booked));
            let took = drive(conns, slots.len(), None, move |i| {
                let (a, s, b) = (Arc::clone(&a), Arc::clone(&s), Arc::clone(&b));
                async move {
                    let p = base + i as u64;
                    let vars = json!({ "s": s[i].0.to_string(), "k": format!("lc-{p}"), "p": p.to_string() });
                    if let Some(id) = a.call("book", "bookAppointment", BOOK_MUTATION, vars).await {
                        b.lock().unwrap_or_else(PoisonError::into_inner).push(id["appointment"]["id"].clone());
                    }
                }
            })
            .await?;
            println!("set-up: {} bookings on {} fresh grid slots", slots.len(), slots.len());
            healthy &= api.recorder.report(took);
            if args.waiters > 0 {
                let mut days: Vec<(i64, String)> = slots.iter().map(|(_, d, t)| (*d, t.clone())).collect();
                days.dedup();
                let joins = Arc::new(days);
                let (a, j, w) = (Arc::clone(&api), Arc::clone(&joins), args.waiters);
                let took = drive(conns, joins.len() * w, None, move |i| {
                    let (a, j) = (Arc::clone(&a), Arc::clone(&j));
                    async move {
                        let p = base + 500_000_000 + i as u64;
                        let (doctor, day) = &j[i / w];
                        let vars =
                            json!({ "d": doctor.to_string(), "t": day, "k": format!("lw-{p}"), "p": p.to_string() });
                        a.call("join", "joinWaitlist", JOIN_MUTATION, vars).await;
                    }
                })
                .await?;
                println!("set-up: {} waiters on each of {} doctor-days", w, joins.len());
                healthy &= api.recorder.report(took);
            }
            let mut ids = std::mem::take(&mut *booked.lock().unwrap_or_else(PoisonError::into_inner));
            if args.shuffle {
                ids.shuffle(&mut rand::thread_rng());
            }
            let ids = Arc::new(ids);
            let (a, i2) = (Arc::clone(&api), Arc::clone(&ids));
            let elapsed = drive(conns, ids.len(), None, move |i| {
                let (a, i2) = (Arc::clone(&a), Arc::clone(&i2));
                async move {
                    a.call("cancel", "cancelAppointment", CANCEL_MUTATION, json!({ "id": i2[i] })).await;
                }
            })
            .await?;
            println!(
                "scenario=Cancel closed, {conns} connections, {} cancels, {} waiters per doctor-day, {:.2} s",
                ids.len(),
                args.waiters,
                elapsed.as_secs_f64()
            );
            healthy &= api.recorder.report(elapsed);
            let offered: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM waitlist_entry WHERE status = 'OFFERED' AND patient_id >= $1 AND patient_id < $2",
            )
            .bind(i64::try_from(base).unwrap_or(i64::MAX))
            .bind(i64::try_from(base + 1_000_000_000).unwrap_or(i64::MAX))
            .fetch_one(&pool)
            .await?;
            println!("waitlist: {offered} seats offered as holds to waiting patients");
        }
        LifeScenario::Expiry => {
            let slots = Arc::new(fresh_grid(&pool, &manifest, args.count).await?);
            let (a, s) = (Arc::clone(&api), Arc::clone(&slots));
            let took = drive(conns, slots.len(), None, move |i| {
                let (a, s) = (Arc::clone(&a), Arc::clone(&s));
                async move {
                    let p = base + i as u64;
                    let vars = json!({ "s": s[i].0.to_string(), "k": format!("le-{p}"), "p": p.to_string() });
                    a.call("hold", "holdSlot", HOLD_MUTATION, vars).await;
                }
            })
            .await?;
            println!("set-up: {} holds on fresh grid slots", slots.len());
            healthy &= api.recorder.report(took);
            let range =
                (i64::try_from(base).unwrap_or(i64::MAX), i64::try_from(base + 1_000_000_000).unwrap_or(i64::MAX));
            let (moved, due_in_ms): (i64, f64) = sqlx::query_as(
                "WITH due AS (SELECT date_trunc('second', clock_timestamp()) + interval '3 seconds' AS at), \
                 m AS (UPDATE appointment SET expires_at = (SELECT at FROM due) \
                       WHERE status = 'HELD' AND patient_id >= $1 AND patient_id < $2 RETURNING 1) \
                 SELECT (SELECT count(*) FROM m), \
                        extract(epoch FROM (SELECT at FROM due) - clock_timestamp())::float8 * 1000",
            )
            .bind(range.0)
            .bind(range.1)
            .fetch_one(&pool)
            .await
            .context("moving the holds' expiry")?;
            let due = Instant::now() + Duration::from_secs_f64(due_in_ms.max(0.0) / 1000.0);
            println!("{moved} holds now expire at the same second, {due_in_ms:.0} ms from now");
            let mut left = moved;
            let mut first_gone = None;
            while left > 0 && Instant::now() < due + EXPIRY_DEADLINE {
                tokio::time::sleep(Duration::from_millis(50)).await;
                left = sqlx::query_scalar(
                    "SELECT count(*) FROM appointment WHERE status = 'HELD' AND patient_id >= $1 AND patient_id < $2",
                )
                .bind(range.0)
                .bind(range.1)
                .fetch_one(&pool)
                .await?;
                if left < moved && first_gone.is_none() {
                    first_gone = Some(Instant::now().saturating_duration_since(due));
                }
            }
            let all_gone = Instant::now().saturating_duration_since(due);
            println!(
                "expiry: {} of {moved} released; first seats back {:.2} s after the due second, all {:.2} s after",
                moved - left,
                first_gone.unwrap_or_default().as_secs_f64(),
                all_gone.as_secs_f64()
            );
            healthy &= left == 0;
        }
    }

    let c = check::check(&args.database_url, &[]).await?;
    println!(
        "check: {} slots, booked_count<>active seats: {}, over capacity: {}",
        c.slots, c.mismatch, c.over_capacity
    );
    healthy &= c.mismatch == 0 && c.over_capacity == 0;
    println!("verdict: {}", if healthy { "OK" } else { "FAILED" });
    Ok(healthy)
}
