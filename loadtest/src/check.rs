//! The invariant, checked in the database after a run: every slot's `booked_count` equals the
//! seats its active (HELD or BOOKED) appointments take in it (their first slot, and each further
//! slot of a longer one) and never exceeds its capacity (all slots), plus the figures of the
//! run's hot set.

use anyhow::Context;

/// The invariant on every slot; `$further` adds the seats of longer appointments' further slots.
macro_rules! check_sql {
    ($further:literal) => {
        concat!(
            "SELECT count(*) FILTER (WHERE s.booked_count <> coalesce(a.n, 0)), \
                    count(*) FILTER (WHERE s.booked_count > s.capacity), count(*) \
             FROM time_slot s LEFT JOIN ( \
                 SELECT slot_id, count(*) AS n FROM ( \
                     SELECT slot_id FROM appointment WHERE status IN ('HELD', 'BOOKED') ",
            $further,
            ") seats GROUP BY slot_id) a ON a.slot_id = s.id"
        )
    };
}
/// The check of a schema with longer appointments.
const CHECK_WITH_FURTHER_SLOTS: &str = check_sql!(
    "UNION ALL SELECT x.slot_id FROM appointment_slot x JOIN appointment a ON a.id = x.appointment_id \
     WHERE a.status IN ('HELD', 'BOOKED')"
);
/// The check of a schema from before them.
const CHECK_FIRST_SLOTS_ONLY: &str = check_sql!("");

/// What the check found.
pub(crate) struct Checked {
    /// Slots whose count differs from the seats their active appointments take.
    pub(crate) mismatch: i64,
    /// Slots over capacity.
    pub(crate) over_capacity: i64,
    /// Slots checked.
    pub(crate) slots: i64,
    /// Sum of `booked_count` over the hot set.
    pub(crate) hot_booked_count: i64,
    /// Active appointments in the hot set (by first slot).
    pub(crate) hot_booked: i64,
    /// Hot-set slots holding exactly `capacity` bookings.
    pub(crate) hot_full: i64,
}

/// Runs the check on `database_url`; `hot` is the run's hot set.
pub(crate) async fn check(database_url: &str, hot: &[i64]) -> anyhow::Result<Checked> {
    let pool = sqlx::PgPool::connect(database_url).await.context("connecting for the check")?;
    // A server from before longer appointments (a baseline binary) has no appointment_slot.
    let longer: bool = sqlx::query_scalar("SELECT to_regclass('appointment_slot') IS NOT NULL")
        .fetch_one(&pool)
        .await
        .context("looking for appointment_slot")?;
    let sql = if longer { CHECK_WITH_FURTHER_SLOTS } else { CHECK_FIRST_SLOTS_ONLY };
    let (mismatch, over_capacity, slots): (i64, i64, i64) =
        sqlx::query_as(sql).fetch_one(&pool).await.context("checking every slot")?;
    let (hot_booked_count, hot_full): (i64, i64) = sqlx::query_as(
        "SELECT coalesce(sum(booked_count), 0)::bigint, count(*) FILTER (WHERE booked_count = capacity) \
         FROM time_slot WHERE id = ANY($1)",
    )
    .bind(hot)
    .fetch_one(&pool)
    .await
    .context("checking the hot set")?;
    let hot_booked: i64 =
        sqlx::query_scalar("SELECT count(*) FROM appointment WHERE status IN ('HELD', 'BOOKED') AND slot_id = ANY($1)")
            .bind(hot)
            .fetch_one(&pool)
            .await
            .context("counting the hot set's bookings")?;
    Ok(Checked { mismatch, over_capacity, slots, hot_booked_count, hot_booked, hot_full })
}
