//! `run`: the load itself, open or closed model, and the report.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use clinic_booking::{
    auth::{Claims, TokenIssuer},
    config::Secret,
};
use rand::Rng;
use serde_json::{json, Value};

use crate::{check, seed::Manifest, RunArgs, Scenario};

const SLOTS_QUERY: &str = "query($d:ID!,$t:Date!){availableSlots(doctorId:$d,date:$t){id startAt available}}";
const FIND_QUERY: &str = "query($in:FindSlotsInput!,$first:Int){findSlots(input:$in,first:$first)\
    {edges{cursor node{id startAt available}} pageInfo{hasNextPage}}}";
pub(crate) const BOOK_MUTATION: &str = "mutation($s:ID!,$k:String!,$p:ID!){bookAppointment(input:{slotId:$s,\
    idempotencyKey:$k,patientId:$p}){appointment{id} replayed userErrors{code}}}";
/// Seats of the success path's slots (every booking commits).
pub(crate) const WIDE_CAPACITY: i32 = 2_000_000_000;
/// How long answers still in flight at the end are waited for.
const DRAIN: Duration = Duration::from_secs(30);

/// The operations measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Book = 0,
    Read = 1,
    Find = 2,
}

/// Latencies and outcomes of one operation.
#[derive(Default)]
struct OpStats {
    latencies_us: Vec<u64>,
    /// (intended send time since the start in ms, latency in µs), for `--timeline`.
    timeline: Vec<(u64, u64)>,
    outcomes: BTreeMap<String, u64>,
    skipped: u64,
    last_done: Option<Instant>,
}

/// Everything a request task needs.
struct Ctx {
    client: reqwest::Client,
    url: String,
    partner_auth: String,
    doctors: Vec<i64>,
    dates: Vec<String>,
    hot: Vec<i64>,
    /// Slots the seed made (ids 1 to this), booked at random beside searches.
    seeded_slots: i64,
    nonce: u64,
    seq: AtomicU64,
    in_flight: AtomicUsize,
    max_in_flight: usize,
    /// Open model: one place per connection (wrk2's way): a request waits here for a free
    /// connection, and that wait counts in its latency (measured from the intended time).
    connections: tokio::sync::Semaphore,
    start: Instant,
    stats: [Mutex<OpStats>; 3],
    /// What a search looks for.
    scenario: Scenario,
    /// The seed's specialties with their doctors' count, largest first.
    specialties: Vec<(String, usize)>,
}

impl Ctx {
    fn stats(&self, kind: Kind) -> std::sync::MutexGuard<'_, OpStats> {
        self.stats[kind as usize].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The request body: a random grid doctor and day, or a booking of a random hot slot for a
    /// new patient with a new key (so the per-patient rate limit never fires).
    fn body(&self, kind: Kind) -> String {
        let mut rng = rand::thread_rng();
        match kind {
            Kind::Read => {
                let d = self.doctors[rng.gen_range(0..self.doctors.len())];
                let t = &self.dates[rng.gen_range(0..self.dates.len())];
                json!({ "query": SLOTS_QUERY, "variables": { "d": d.to_string(), "t": t } }).to_string()
            }
            Kind::Find => {
                let day = |i: usize| format!("{}T00:00:00Z", self.dates[i]);
                let pick_day = self.dates.len().saturating_sub(1).max(1);
                let (specialty, from, first, one) = match self.scenario {
                    Scenario::FindWorst => (crate::seed::WORST.to_owned(), day(0), 20, false),
                    Scenario::FindOne => {
                        let large: Vec<&(String, usize)> = self.specialties.iter().filter(|(_, n)| *n >= 100).collect();
                        let s = large.get(rng.gen_range(0..large.len().max(1))).map_or("general", |s| s.0.as_str());
                        (s.to_owned(), day(rng.gen_range(0..pick_day)), 100, true)
                    }
                    _ => {
                        let s = self.specialties.get(rng.gen_range(0..self.specialties.len().max(1)));
                        (s.map_or("general", |s| s.0.as_str()).to_owned(), day(rng.gen_range(0..pick_day)), 20, false)
                    }
                };
                let to = chrono::DateTime::parse_from_rfc3339(&from)
                    .map(|t| (t + chrono::TimeDelta::days(14)).to_rfc3339())
                    .unwrap_or_default();
                json!({ "query": FIND_QUERY, "variables": { "first": first, "in": {
                    "from": from, "to": to, "specialty": specialty, "onePerDoctor": one } } })
                .to_string()
            }
            Kind::Book => {
                let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                let s = match self.hot.is_empty() {
                    true => rng.gen_range(1..=self.seeded_slots.max(1)),
                    false => self.hot[rng.gen_range(0..self.hot.len())],
                };
                let patient = self.nonce * 1_000_000_000 + seq;
                json!({ "query": BOOK_MUTATION, "variables": {
                    "s": s.to_string(), "k": format!("lt-{}-{seq}", self.nonce), "p": patient.to_string() } })
                .to_string()
            }
        }
    }

    async fn send(&self, kind: Kind, intended: Instant) {
        let Ok(_connection) = self.connections.acquire().await else {
            return;
        };
        let mut req =
            self.client.post(&self.url).header(reqwest::header::CONTENT_TYPE, "application/json").body(self.body(kind));
        if kind == Kind::Book {
            req = req.header(reqwest::header::AUTHORIZATION, &self.partner_auth);
        }
        let outcome = match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                match resp.bytes().await {
                    Ok(body) => classify(status, &body),
                    Err(_) => "transport_error".to_owned(),
                }
            }
            Err(_) => "transport_error".to_owned(),
        };
        let done = Instant::now();
        let latency = u64::try_from(done.saturating_duration_since(intended).as_micros()).unwrap_or(u64::MAX);
        let since_start = u64::try_from(intended.saturating_duration_since(self.start).as_millis()).unwrap_or(0);
        let mut stats = self.stats(kind);
        stats.latencies_us.push(latency);
        stats.timeline.push((since_start, latency));
        *stats.outcomes.entry(outcome).or_default() += 1;
        stats.last_done = Some(stats.last_done.map_or(done, |t| t.max(done)));
    }
}

/// One outcome per answer, as the peers' wrk scripts classify them.
fn classify(status: u16, body: &[u8]) -> String {
    if status >= 500 {
        return format!("http_{status}");
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return format!("http_{status}_unparsable");
    };
    if let Some(errors) = v.get("errors") {
        return format!("err_{}", errors.pointer("/0/extensions/code").and_then(Value::as_str).unwrap_or("NOCODE"));
    }
    if status != 200 {
        return format!("http_{status}");
    }
    if let Some(list) = v.pointer("/data/availableSlots") {
        return if list.as_array().is_some_and(Vec::is_empty) { "read_empty" } else { "read_ok" }.to_owned();
    }
    if let Some(edges) = v.pointer("/data/findSlots/edges") {
        return if edges.as_array().is_some_and(Vec::is_empty) { "find_empty" } else { "find_ok" }.to_owned();
    }
    if let Some(b) = v.pointer("/data/bookAppointment") {
        if b.get("appointment").is_some_and(Value::is_object) {
            return if b["replayed"] == true { "replayed" } else { "booked" }.to_owned();
        }
        if let Some(code) = b.pointer("/userErrors/0/code").and_then(Value::as_str) {
            return format!("ue_{code}");
        }
    }
    "other".to_owned()
}

pub(crate) fn mint(issuer: &TokenIssuer, sub: &str, role: &str) -> anyhow::Result<String> {
    let claims =
        Claims { sub: sub.into(), role: role.into(), exp: chrono::Utc::now().timestamp() + 86_400, doctor_id: None };
    Ok(issuer.issue(&claims)?)
}

/// POSTs one operation as `token` and returns `data`, failing on any error.
pub(crate) async fn gql(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    query: &str,
    variables: Value,
) -> anyhow::Result<Value> {
    let body: Value = client
        .post(url)
        .bearer_auth(token)
        .json(&json!({ "query": query, "variables": variables }))
        .send()
        .await?
        .json()
        .await?;
    anyhow::ensure!(body.get("errors").is_none(), "{query}: {body}");
    Ok(body["data"].clone())
}

/// A fresh hot set through the API: a new doctor with 50 slots of `capacity` tomorrow.
pub(crate) async fn hot_set(
    client: &reqwest::Client,
    url: &str,
    admin: &str,
    capacity: i32,
) -> anyhow::Result<Vec<i64>> {
    let doctor = gql(
        client,
        url,
        admin,
        "mutation($n:String!){createDoctor(input:{name:$n,timezone:\"UTC\"}){id}}",
        json!({ "n": format!("Hot set {}", chrono::Utc::now().timestamp_micros()) }),
    )
    .await?;
    let tomorrow = (chrono::Utc::now().date_naive() + chrono::Days::new(1)).format("%Y-%m-%d").to_string();
    let data = gql(
        client,
        url,
        admin,
        "mutation($in:PublishScheduleInput!){publishSchedule(input:$in){slots{id}}}",
        json!({ "in": { "doctorId": doctor["createDoctor"]["id"], "date": tomorrow, "startTime": "08:00",
                        "endTime": "20:30", "slotMinutes": 15, "capacity": capacity } }),
    )
    .await?;
    data["publishSchedule"]["slots"]
        .as_array()
        .context("no slots")?
        .iter()
        .map(|s| s["id"].as_str().and_then(|id| id.parse().ok()).context("slot id"))
        .collect()
}

/// Runs `run`.
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<bool> {
    let manifest: Manifest = serde_json::from_slice(
        &std::fs::read(&args.seed).with_context(|| format!("reading {} (run `seed` first)", args.seed.display()))?,
    )?;
    anyhow::ensure!(!manifest.doctors.is_empty() && !manifest.dates.is_empty(), "the manifest is empty");
    let searches = matches!(args.scenario, Scenario::FindSlots | Scenario::FindWorst | Scenario::FindOne);
    anyhow::ensure!(
        !searches || !manifest.specialties.is_empty(),
        "the manifest has no specialties: seed again with this clinic-loadtest"
    );
    let issuer = TokenIssuer::new(&Secret::new(args.secret.clone()))?;
    let admin = mint(&issuer, "900000001", "admin")?;
    let partner = mint(&issuer, "900000002", "partner")?;
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(args.connections.unwrap_or(args.max_connections))
        .timeout(Duration::from_secs(30))
        .build()?;
    let url = format!("{}/graphql", args.url.trim_end_matches('/'));

    let hot = match args.scenario {
        Scenario::Reads | Scenario::FindSlots | Scenario::FindWorst | Scenario::FindOne => Vec::new(),
        Scenario::Success => hot_set(&client, &url, &admin, WIDE_CAPACITY).await?,
        Scenario::Opening | Scenario::Reject | Scenario::Mix => hot_set(&client, &url, &admin, 1).await?,
    };
    if args.scenario == Scenario::Reject {
        for (i, slot) in hot.iter().enumerate() {
            gql(
                &client,
                &url,
                &partner,
                BOOK_MUTATION,
                json!({ "s": slot.to_string(), "k": format!("fill-{slot}"), "p": (7_000_000_000u64 + i as u64).to_string() }),
            )
            .await?;
        }
    }
    let nonce = u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0) % 1_000_000;
    let make_ctx = |hot: Vec<i64>, start: Instant, nonce: u64| {
        Arc::new(Ctx {
            client: client.clone(),
            url: url.clone(),
            partner_auth: format!("Bearer {partner}"),
            doctors: manifest.doctors.clone(),
            dates: manifest.dates.clone(),
            hot,
            seeded_slots: manifest.slots,
            nonce,
            seq: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: args.max_in_flight,
            connections: tokio::sync::Semaphore::new(args.connections.unwrap_or(args.max_connections)),
            start,
            stats: [Mutex::default(), Mutex::default(), Mutex::default()],
            scenario: args.scenario,
            specialties: manifest.specialties.clone(),
        })
    };
    let rpw = u64::from(args.reads_per_write) + 1;
    let pick = move |scenario: Scenario, n: u64| match scenario {
        Scenario::Reads => Kind::Read,
        Scenario::FindSlots | Scenario::FindWorst | Scenario::FindOne => Kind::Find,
        Scenario::Mix if !n.is_multiple_of(rpw) => Kind::Read,
        _ => Kind::Book,
    };

    // The warm-up: the same open load on another set, so connections (ours and the server's
    // database pool) are open and warm when the measured load starts, as they are on a server
    // that served traffic before the schedule opens. Not measured.
    if let (Some(rate), true) = (args.rate, args.warmup > 0) {
        let warm_set = hot_set(&client, &url, &admin, 1).await?;
        let warm_start = Instant::now() + Duration::from_millis(50);
        let warm = make_ctx(warm_set, warm_start, nonce + 500_000);
        let warm_for = Duration::from_secs(args.warmup);
        let mut loops =
            vec![tokio::spawn(open_loop(Arc::clone(&warm), args.scenario, rate, warm_start, warm_for, pick))];
        if args.scenario == Scenario::Opening && args.read_rate > 0.0 {
            loops.push(tokio::spawn(open_loop(
                Arc::clone(&warm),
                Scenario::Reads,
                args.read_rate,
                warm_start,
                warm_for,
                pick,
            )));
        }
        for l in loops {
            l.await?;
        }
        let drain_until = Instant::now() + DRAIN;
        while warm.in_flight.load(Ordering::Relaxed) > 0 && Instant::now() < drain_until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // Telling people: an email address for every patient the measured load books for, and
    // the partner subscribed to a receiver; the report after the load shows the lag.
    let mut endpoint = None;
    let deliveries_since = match (&args.database_url, args.contacts || args.webhook.is_some()) {
        (Some(db), true) => {
            if args.contacts {
                let expected = args.rate.unwrap_or(20_000.0) * args.duration as f64;
                let first = i64::try_from(nonce * 1_000_000_000).unwrap_or(i64::MAX);
                crate::deliveries::add_contacts(db, first, expected as i64 + 1_000).await?;
            }
            if let Some(hook) = &args.webhook {
                endpoint = Some(crate::deliveries::subscribe(&client, &url, &partner, hook).await?);
            }
            Some(crate::deliveries::last_appointment(db).await?)
        }
        (None, true) => anyhow::bail!("--contacts and --webhook need --database-url for the report"),
        _ => None,
    };

    let start = Instant::now() + Duration::from_millis(50);
    let start_unix_ms = unix_ms() + 50;
    let ctx = make_ctx(hot.clone(), start, nonce);
    let duration = Duration::from_secs(args.duration);
    let poller = args.poll_feed.map(|every| {
        let (client, base) = (client.clone(), args.url.clone());
        tokio::spawn(crate::feed::poll(client, base, Duration::from_secs_f64(every.max(0.05)), start + duration))
    });
    let model = if let Some(connections) = args.connections {
        let deadline = start + duration;
        let mut workers = Vec::new();
        if searches && args.book_rate > 0.0 {
            let bookings = open_loop(Arc::clone(&ctx), Scenario::Success, args.book_rate, start, duration, pick);
            workers.push(tokio::spawn(bookings));
        }
        for w in 0..connections {
            let ctx = Arc::clone(&ctx);
            let scenario = args.scenario;
            workers.push(tokio::spawn(async move {
                tokio::time::sleep_until(start.into()).await;
                let mut n = w as u64;
                while Instant::now() < deadline {
                    ctx.send(pick(scenario, n), Instant::now()).await;
                    n += connections as u64;
                }
            }));
        }
        for w in workers {
            w.await?;
        }
        match searches && args.book_rate > 0.0 {
            true => format!("closed, {connections} connections + {}/s bookings of seeded slots", args.book_rate),
            false => format!("closed, {connections} connections"),
        }
    } else {
        let rate = args.rate.context("give --rate (open model) or --connections (closed model)")?;
        let mut loops = vec![tokio::spawn(open_loop(Arc::clone(&ctx), args.scenario, rate, start, duration, pick))];
        if args.scenario == Scenario::Opening && args.read_rate > 0.0 {
            loops.push(tokio::spawn(open_loop(
                Arc::clone(&ctx),
                Scenario::Reads,
                args.read_rate,
                start,
                duration,
                pick,
            )));
        }
        for l in loops {
            l.await?;
        }
        let drain_until = Instant::now() + DRAIN;
        while ctx.in_flight.load(Ordering::Relaxed) > 0 && Instant::now() < drain_until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        match args.scenario {
            Scenario::Opening => format!("open, {rate}/s bookings + {}/s reads", args.read_rate),
            _ => format!("open, {rate}/s"),
        }
    };

    if let Some(poller) = poller {
        println!("{}", poller.await?.line());
    }
    println!(
        "scenario={:?} model=({model}) duration={}s warm-up={}s hot_set={}",
        args.scenario,
        args.duration,
        if args.rate.is_some() { args.warmup } else { 0 },
        hot.len()
    );
    println!(
        "{:<5} {:>9} {:>11} {:>8} {:>8} {:>8} {:>9} {:>9}  outcomes",
        "op", "done", "achieved/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    let mut healthy = true;
    let mut csv = String::new();
    for (kind, name) in [(Kind::Book, "book"), (Kind::Read, "read"), (Kind::Find, "find")] {
        let mut stats = ctx.stats(kind);
        if args.latencies.is_some() {
            for (at_ms, latency_us) in &stats.timeline {
                csv.push_str(&format!("{name},{},{latency_us}\n", start_unix_ms + at_ms));
            }
        }
        if stats.latencies_us.is_empty() && stats.skipped == 0 {
            continue;
        }
        stats.latencies_us.sort_unstable();
        let lat = &stats.latencies_us;
        let pct = |p: f64| percentile_ms(lat, p);
        let elapsed = stats.last_done.map_or(duration, |t| t.saturating_duration_since(start)).max(duration);
        let outcomes: Vec<String> = stats.outcomes.iter().map(|(k, v)| format!("{k}:{v}")).collect();
        let bad: u64 = stats.outcomes.iter().filter(|(k, _)| failed(k)).map(|(_, v)| v).sum();
        healthy &= bad == 0 && stats.skipped == 0;
        println!(
            "{name:<5} {:>9} {:>11.1} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.2}  {}{}",
            lat.len(),
            lat.len() as f64 / elapsed.as_secs_f64(),
            pct(0.50),
            pct(0.90),
            pct(0.99),
            pct(0.999),
            lat.last().copied().unwrap_or(0) as f64 / 1000.0,
            outcomes.join(","),
            if stats.skipped > 0 { format!(" SKIPPED(generator full):{}", stats.skipped) } else { String::new() }
        );
        if args.timeline {
            print_timeline(name, &stats.timeline);
        }
    }

    if let Some(path) = &args.latencies {
        std::fs::write(path, csv).with_context(|| format!("writing {}", path.display()))?;
    }
    if let (Some(db), Some(since)) = (&args.database_url, deliveries_since) {
        healthy &= crate::deliveries::report(db, since).await?;
    }
    if let Some(id) = endpoint {
        crate::deliveries::unsubscribe(&client, &url, &partner, &id).await?;
    }
    if let Some(db) = &args.database_url {
        let c = check::check(db, &hot).await?;
        println!(
            "check: {} slots, booked_count<>BOOKED: {}, over capacity: {}; hot set: {} slots, sum(booked_count)={}, \
             BOOKED={}, full={}",
            c.slots,
            c.mismatch,
            c.over_capacity,
            hot.len(),
            c.hot_booked_count,
            c.hot_booked,
            c.hot_full
        );
        healthy &= c.mismatch == 0 && c.over_capacity == 0 && c.hot_booked_count == c.hot_booked;
        if args.scenario == Scenario::Opening {
            healthy &= c.hot_full == i64::try_from(hot.len()).unwrap_or(0) && c.hot_booked == c.hot_full;
        }
    } else {
        println!("check: skipped (no --database-url)");
    }
    println!("verdict: {}", if healthy { "OK" } else { "FAILED" });
    Ok(healthy)
}

/// The `p` quantile of `sorted` (µs, ascending), in ms; 0 for none.
pub(crate) fn percentile_ms(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).copied().unwrap_or(0) as f64 / 1000.0
}

/// Whether an outcome is the server failing (a 5xx) or the connection (no answer).
pub(crate) fn failed(outcome: &str) -> bool {
    outcome.starts_with("http_5") || outcome == "transport_error"
}

/// Sends at fixed intended times (`rate` per second for `duration`), whatever the answers do.
async fn open_loop(
    ctx: Arc<Ctx>,
    scenario: Scenario,
    rate: f64,
    start: Instant,
    duration: Duration,
    pick: impl Fn(Scenario, u64) -> Kind,
) {
    if rate <= 0.0 {
        return;
    }
    let total = (rate * duration.as_secs_f64()).round() as u64;
    for n in 0..total {
        let intended = start + Duration::from_secs_f64(n as f64 / rate);
        if intended > Instant::now() {
            tokio::time::sleep_until(intended.into()).await;
        }
        let kind = pick(scenario, n);
        if ctx.in_flight.load(Ordering::Relaxed) >= ctx.max_in_flight {
            ctx.stats(kind).skipped += 1;
            continue;
        }
        ctx.in_flight.fetch_add(1, Ordering::Relaxed);
        let task_ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            task_ctx.send(kind, intended).await;
            task_ctx.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// Milliseconds since the Unix epoch, now.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// p99 and max latency per second of intended send time.
fn print_timeline(name: &str, timeline: &[(u64, u64)]) {
    let mut by_second: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (at_ms, lat) in timeline {
        by_second.entry(at_ms / 1000).or_default().push(*lat);
    }
    let line: Vec<String> = by_second
        .into_iter()
        .map(|(sec, mut lats)| {
            lats.sort_unstable();
            format!("{sec}s:{:.1}/{:.1}", percentile_ms(&lats, 0.99), lats.last().copied().unwrap_or(0) as f64 / 1000.0)
        })
        .collect();
    println!("  {name} p99/max ms by second: {}", line.join(" "));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_classified_like_the_wrk_scripts() {
        assert_eq!(classify(200, br#"{"data":{"availableSlots":[]}}"#), "read_empty");
        assert_eq!(classify(200, br#"{"data":{"availableSlots":[{"id":"1"}]}}"#), "read_ok");
        assert_eq!(
            classify(200, br#"{"data":{"bookAppointment":{"appointment":{"id":"1"},"replayed":false}}}"#),
            "booked"
        );
        assert_eq!(
            classify(200, br#"{"data":{"bookAppointment":{"appointment":null,"userErrors":[{"code":"SLOT_FULL"}]}}}"#),
            "ue_SLOT_FULL"
        );
        assert_eq!(classify(429, br#"{"errors":[{"extensions":{"code":"RATE_LIMITED"}}]}"#), "err_RATE_LIMITED");
        assert_eq!(classify(502, b"x"), "http_502");
    }
}
