//! `seed`: the benchmark data set in two set-based statements (doctors, then every slot), the
//! same shape as the peers' `seed.sql`: days from tomorrow (UTC), 08:00–18:00, 15 minutes,
//! capacity 1.

use std::{path::PathBuf, time::Instant};

use anyhow::Context;
use clinic_booking::{
    config::DatabaseTarget,
    db::{Db, PoolSettings},
};
use serde::{Deserialize, Serialize};

/// Settings of `seed`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct SeedArgs {
    /// A PostgreSQL URL (the server's `DATABASE_URL`).
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// Doctors.
    #[arg(long, default_value_t = 2000)]
    doctors: i32,
    /// Days from tomorrow.
    #[arg(long, default_value_t = 14)]
    days: i32,
    /// Leave the schema to the server (already migrated by the binary under test, which may
    /// be older than this one's migrations).
    #[arg(long)]
    no_migrate: bool,
    /// Where the manifest goes.
    #[arg(long, default_value = "loadtest-seed.json")]
    out: PathBuf,
}

/// What `run` needs to know about the seeded grid.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Manifest {
    /// Every seeded doctor.
    pub(crate) doctors: Vec<i64>,
    /// Every seeded day, `YYYY-MM-DD`.
    pub(crate) dates: Vec<String>,
    /// Slots created.
    pub(crate) slots: i64,
}

/// Runs `seed`.
pub(crate) async fn run(args: SeedArgs) -> anyhow::Result<bool> {
    let started = Instant::now();
    let settings = PoolSettings {
        max_connections: 2,
        acquire_timeout: std::time::Duration::from_secs(10),
        statement_timeout: std::time::Duration::from_secs(600),
        hot_connections: 0,
    };
    let target = DatabaseTarget::parse(&args.database_url).map_err(anyhow::Error::msg)?;
    anyhow::ensure!(!target.is_sqlite(), "the benchmark seeds PostgreSQL only");
    if !args.no_migrate {
        Db::connect(&target, &settings).await?.migrate().await.context("migrating")?;
    }
    let pool = sqlx::PgPool::connect(&args.database_url).await.context("connecting")?;

    let t = Instant::now();
    let doctors: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO doctor (name, specialty, timezone, created_at) \
         SELECT 'Doctor ' || g, (ARRAY['general','cardiology','dermatology','pediatrics','orthopedics',\
         'neurology','ophthalmology','dentistry'])[1 + g % 8], 'UTC', now() \
         FROM generate_series(1, $1) AS g RETURNING id",
    )
    .bind(args.doctors)
    .fetch_all(&pool)
    .await
    .context("inserting doctors")?;
    let doctors_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let slots = sqlx::query(
        "INSERT INTO time_slot (doctor_id, start_at, end_at, capacity, booked_count, version) \
         SELECT d.id, day.at + make_interval(mins => 480 + 15 * s), day.at + make_interval(mins => 495 + 15 * s), 1, 0, 0 \
         FROM unnest($1::bigint[]) AS d(id) \
         CROSS JOIN LATERAL (SELECT (date_trunc('day', now() AT TIME ZONE 'UTC') + make_interval(days => n)) \
                              AT TIME ZONE 'UTC' AS at FROM generate_series(1, $2) AS n) AS day \
         CROSS JOIN generate_series(0, 39) AS s \
         ON CONFLICT DO NOTHING",
    )
    .bind(&doctors)
    .bind(args.days)
    .execute(&pool)
    .await
    .context("inserting slots")?
    .rows_affected();
    let slots_s = t.elapsed().as_secs_f64();

    // VACUUM as well as ANALYZE: the measured runs then start on a database like a long-running
    // one's, not beside autovacuum's first pass over a million fresh rows.
    let t = Instant::now();
    sqlx::query("VACUUM (ANALYZE)").execute(&pool).await.context("vacuum")?;
    let analyze_s = t.elapsed().as_secs_f64();

    let today = chrono::Utc::now().date_naive();
    let dates = (1..=args.days)
        .filter_map(|n| today.checked_add_days(chrono::Days::new(u64::try_from(n).unwrap_or(0))))
        .map(|d| d.format("%Y-%m-%d").to_string())
        .collect();
    let manifest = Manifest { doctors, dates, slots: i64::try_from(slots).unwrap_or(i64::MAX) };
    std::fs::write(&args.out, serde_json::to_vec(&manifest)?).with_context(|| format!("writing {:?}", args.out))?;
    println!(
        "seeded {} doctors ({doctors_s:.1} s) and {slots} slots ({slots_s:.1} s), VACUUM (ANALYZE) {analyze_s:.1} s; \
         total {:.1} s; manifest {}",
        manifest.doctors.len(),
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(true)
}
