//! Telling people under load (issue 12): `run --contacts` gives every patient the run books for
//! an email address (one set-based insert, a benchmark fixture), `run --webhook URL` subscribes
//! the partner to every event at URL, and after the load the report waits for both queues to
//! drain and prints how far behind the commits each delivery went out. `receive` is the
//! webhook receiver such a run points at: it answers every POST `204` and counts them.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use serde_json::json;

use crate::load::gql;

/// Queued, delivered, attempts, and the lag's p50, p99 and max in seconds.
type Lags = (i64, i64, i64, Option<f64>, Option<f64>, Option<f64>);

/// How long the report waits for the queues to drain.
const DRAIN: Duration = Duration::from_secs(180);

/// Settings of `receive`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct ReceiveArgs {
    /// The port on 127.0.0.1.
    #[arg(long, default_value_t = 18090)]
    port: u16,
}

/// Runs `receive` until killed, printing the count of POSTs received each second it changed.
pub(crate) async fn receive(args: ReceiveArgs) -> anyhow::Result<bool> {
    let count = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&count);
    // The body is read before the answer: a server answering first and closing the connection
    // on the unread body makes the sender see a reset, count a failed attempt and send again.
    let app = axum::Router::new().fallback(move |_body: axum::body::Bytes| {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::Relaxed);
            axum::http::StatusCode::NO_CONTENT
        }
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await.context("binding")?;
    println!("LISTENING {}", args.port);
    tokio::spawn(print_count(count));
    axum::serve(listener, app).await.context("serving")?;
    Ok(true)
}

/// Prints `RECEIVED n` each second `count` changed (the receiver's and the SMTP sink's log).
pub(crate) async fn print_count(count: Arc<AtomicU64>) {
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = count.load(Ordering::Relaxed);
        if now != last {
            println!("RECEIVED {now}");
            last = now;
        }
    }
}

/// Gives patients `first..first + n` an email address.
pub(crate) async fn add_contacts(database_url: &str, first: i64, n: i64) -> anyhow::Result<()> {
    let pool = sqlx::PgPool::connect(database_url).await.context("connecting for the contacts")?;
    let t = Instant::now();
    sqlx::query(
        "INSERT INTO patient_contact (patient_id, email, updated_at, updated_by) \
         SELECT p, 'patient' || p || '@example.org', now(), 'loadtest' FROM generate_series($1::bigint, $2::bigint) AS p \
         ON CONFLICT (patient_id) DO NOTHING",
    )
    .bind(first)
    .bind(first + n - 1)
    .execute(&pool)
    .await
    .context("inserting contacts")?;
    // A bulk load is followed by ANALYZE, as after the seed: the statements that join the
    // contacts are then planned for the table as it is, not as it was before the load.
    sqlx::query("ANALYZE patient_contact").execute(&pool).await.context("analyzing the contacts")?;
    println!("contacts: {n} patients have an email address ({:.1} s)", t.elapsed().as_secs_f64());
    Ok(())
}

/// Subscribes the partner to every event at `url`; returns the endpoint's id.
pub(crate) async fn subscribe(
    client: &reqwest::Client,
    graphql: &str,
    partner: &str,
    url: &str,
) -> anyhow::Result<String> {
    let data = gql(
        client,
        graphql,
        partner,
        "mutation($u:String!){createWebhookEndpoint(input:{url:$u}){endpoint{id} userErrors{code message}}}",
        json!({ "u": url }),
    )
    .await?;
    let payload = &data["createWebhookEndpoint"];
    anyhow::ensure!(payload["endpoint"].is_object(), "createWebhookEndpoint: {payload}");
    println!("webhook: the partner receives every event at {url}");
    Ok(payload["endpoint"]["id"].as_str().unwrap_or_default().to_owned())
}

/// Deletes the run's endpoint, so the next run on the same database sends nothing there.
pub(crate) async fn unsubscribe(
    client: &reqwest::Client,
    graphql: &str,
    partner: &str,
    id: &str,
) -> anyhow::Result<()> {
    gql(
        client,
        graphql,
        partner,
        "mutation($id:ID!){deleteWebhookEndpoint(id:$id){userErrors{code}}}",
        json!({ "id": id }),
    )
    .await?;
    Ok(())
}

/// Waits for the messages (not the reminders, due later) and deliveries of appointments booked
/// after `since_id` to leave, then prints their lag behind the commit; false when some never did.
pub(crate) async fn report(database_url: &str, since_id: i64) -> anyhow::Result<bool> {
    let pool = sqlx::PgPool::connect(database_url).await.context("connecting for the report")?;
    let load_end = Instant::now();
    // The wait asks only whether anything is left: it runs every 100 ms beside the workers it
    // measures, and counting tens of thousands of pending rows each time took a third of a
    // core from them. The lags come from the rows' own timestamps, not from this loop.
    let left = |counting: bool| {
        let sql = if counting {
            "SELECT (SELECT count(*) FROM patient_message WHERE status = 'PENDING' AND purpose = 'EVENT' \
                            AND appointment_id > $1) \
                    + (SELECT count(*) FROM webhook_delivery WHERE status = 'PENDING' AND appointment_id > $1) \
                    + (SELECT count(*) FROM outbox)"
        } else {
            // Each probe walks its queue's partial index of pending rows from the oldest due.
            "SELECT (EXISTS (SELECT 1 FROM patient_message WHERE status = 'PENDING' AND purpose = 'EVENT' \
                                AND appointment_id > $1 ORDER BY next_attempt_at LIMIT 1) \
                     OR EXISTS (SELECT 1 FROM webhook_delivery WHERE status = 'PENDING' AND appointment_id > $1 \
                                ORDER BY next_attempt_at LIMIT 1) \
                     OR EXISTS (SELECT 1 FROM outbox))::int::int8"
        };
        sqlx::query_scalar::<_, i64>(sql).bind(since_id).fetch_one(&pool)
    };
    let mut pending = left(false).await?;
    while pending > 0 && load_end.elapsed() < DRAIN {
        tokio::time::sleep(Duration::from_millis(100)).await;
        pending = left(false).await?;
    }
    if pending > 0 {
        pending = left(true).await?;
    }
    println!(
        "deliveries: queues drained {:.1} s after the load ended ({pending} left)",
        load_end.elapsed().as_secs_f64()
    );
    // Lag: from the booking's commit to the message handed to the mail server, or to the
    // receiver's answer.
    let mail: Lags = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE status = 'SENT'), coalesce(sum(attempts), 0)::bigint, \
                percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - committed_at)), \
                percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - committed_at)), \
                max(extract(epoch FROM sent_at - committed_at))::float8 \
         FROM patient_message WHERE purpose = 'EVENT' AND appointment_id > $1",
    )
    .bind(since_id)
    .fetch_one(&pool)
    .await
    .context("measuring the messages")?;
    let hooks: Lags = sqlx::query_as(
        "WITH l AS (SELECT d.status, d.attempts, extract(epoch FROM t.started_at + t.duration_ms * interval '1 millisecond' \
                                                   - a.created_at) AS lag \
                    FROM webhook_delivery d JOIN appointment a ON a.id = d.appointment_id \
                    LEFT JOIN webhook_attempt t ON t.delivery_id = d.id AND t.attempt = d.attempts \
                    WHERE d.appointment_id > $1) \
         SELECT count(*), count(*) FILTER (WHERE status = 'SUCCEEDED'), coalesce(sum(attempts), 0)::bigint, \
                percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), percentile_cont(0.99) WITHIN GROUP (ORDER BY lag), \
                max(lag)::float8 FROM l",
    )
    .bind(since_id)
    .fetch_one(&pool)
    .await
    .context("measuring the webhooks")?;
    let line = |what: &str, (n, ok, attempts, p50, p99, max): Lags| {
        println!(
            "{what}: {n} queued, {ok} delivered in {attempts} attempts; lag behind the commit p50 {:.3} s, \
             p99 {:.3} s, max {:.3} s",
            p50.unwrap_or(0.0),
            p99.unwrap_or(0.0),
            max.unwrap_or(0.0)
        );
        n == ok
    };
    let mail_ok = line("emails", mail);
    let hooks_ok = line("webhooks", hooks);
    Ok(pending == 0 && mail_ok && hooks_ok)
}

/// The highest appointment id so far: the report counts what comes after it.
pub(crate) async fn last_appointment(database_url: &str) -> anyhow::Result<i64> {
    let pool = sqlx::PgPool::connect(database_url).await.context("connecting")?;
    Ok(sqlx::query_scalar("SELECT coalesce(max(id), 0)::bigint FROM appointment").fetch_one(&pool).await?)
}
