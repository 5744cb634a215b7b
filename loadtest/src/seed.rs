//! `seed`: the benchmark data set in two set-based statements (doctors, then every slot), the
//! same shape as the peers' `seed.sql`: days from tomorrow (UTC), 08:00–18:00, 15 minutes,
//! capacity 1. The doctors have one of [`SPECIALTIES`] (20, of uneven sizes); the first
//! `--full-days` days of [`WORST`] are booked out (one appointment per slot, so the invariant
//! check still holds), the slot search's worst case (docs/find-slots.md).

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
    /// Days from tomorrow whose slots of the [`WORST`] specialty are booked out.
    #[arg(long, default_value_t = 13)]
    full_days: i32,
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
    /// Every specialty with its doctors' count, largest first (none in manifests of older seeds).
    #[serde(default)]
    pub(crate) specialties: Vec<(String, usize)>,
}

/// The seed's specialties and their shares of the doctors, in thousandths (20, summing to 1000).
pub(crate) const SPECIALTIES: [(&str, usize); 20] = [
    ("general", 180),
    ("cardiology", 110),
    ("dermatology", 90),
    ("pediatrics", 80),
    ("orthopedics", 70),
    ("neurology", 60),
    ("rheumatology", 55),
    ("ophthalmology", 50),
    ("dentistry", 45),
    ("psychiatry", 40),
    ("gynecology", 35),
    ("urology", 30),
    ("oncology", 28),
    ("endocrinology", 25),
    ("gastroenterology", 22),
    ("pulmonology", 20),
    ("nephrology", 18),
    ("allergology", 15),
    ("hematology", 14),
    ("geriatrics", 13),
];

/// The specialty whose first `--full-days` days are booked out.
pub(crate) const WORST: &str = "rheumatology";

/// The specialty of each thousandth: doctor `g` (from 1) has `shares()[(g * 7919) % 1000]`
/// (7919 is prime to 1000, so every 1000 doctors take each share exactly).
fn shares() -> Vec<&'static str> {
    SPECIALTIES.iter().flat_map(|(name, n)| std::iter::repeat_n(*name, *n)).collect()
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
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "INSERT INTO doctor (name, specialty, timezone, created_at) \
         SELECT 'Doctor ' || g, ($2::text[])[1 + (g * 7919) % 1000], 'UTC', now() \
         FROM generate_series(1, $1) AS g RETURNING id, specialty",
    )
    .bind(args.doctors)
    .bind(shares())
    .fetch_all(&pool)
    .await
    .context("inserting doctors")?;
    let doctors: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
    let mut specialties: Vec<(String, usize)> = SPECIALTIES
        .iter()
        .map(|(name, _)| ((*name).to_owned(), rows.iter().filter(|(_, s)| s == name).count()))
        .collect();
    specialties.sort_by_key(|s| std::cmp::Reverse(s.1));
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

    // The worst case of the slot search: the first days of one specialty booked out, each
    // slot by an appointment of its own patient (the invariant check counts them).
    let t = Instant::now();
    let filled = sqlx::query(
        "WITH s AS (SELECT t.id, t.start_at, t.end_at, row_number() OVER (ORDER BY t.id) AS n \
                    FROM time_slot t JOIN doctor d ON d.id = t.doctor_id \
                    WHERE d.id = ANY($1) AND d.specialty = $2 \
                      AND t.start_at < (date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') \
                                       + make_interval(days => 1 + $3)), \
              u AS (UPDATE time_slot t SET booked_count = t.capacity, version = t.version + 1 FROM s WHERE t.id = s.id) \
         INSERT INTO appointment (slot_id, patient_id, status, booked_by, idempotency_key, request_hash, created_at, \
                                  start_at, end_at, slot_count) \
         SELECT s.id, 8000000000 + s.n, 'BOOKED', 'partner:seed', 'seed-' || s.id, 'seed', now(), s.start_at, s.end_at, 1 \
         FROM s",
    )
    .bind(&doctors)
    .bind(WORST)
    .bind(args.full_days)
    .execute(&pool)
    .await
    .context("booking out the worst case")?
    .rows_affected();
    let filled_s = t.elapsed().as_secs_f64();

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
    let manifest = Manifest { doctors, dates, slots: i64::try_from(slots).unwrap_or(i64::MAX), specialties };
    std::fs::write(&args.out, serde_json::to_vec(&manifest)?).with_context(|| format!("writing {:?}", args.out))?;
    println!(
        "seeded {} doctors ({doctors_s:.1} s) and {slots} slots ({slots_s:.1} s), {WORST}'s first {} days booked \
         out ({filled} slots, {filled_s:.1} s), VACUUM (ANALYZE) {analyze_s:.1} s; total {:.1} s; manifest {}",
        manifest.doctors.len(),
        args.full_days,
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(true)
}
