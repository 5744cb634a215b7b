//! The waitlist: a seat freed on a doctor's day goes, as a `HELD` offer, to the patient who has
//! waited longest for that day and can take it, in the very transaction that freed it. So a seat
//! someone waits for never shows as free in between, and the refreshers of the opening-morning
//! burst never see it.
//!
//! - A release (a cancel, an expiry, a reschedule away; not a close) looks for waiters of the
//!   freed seats' days: one index probe when nobody waits, nothing on the booking path.
//! - Each waiter, oldest first, gets the next freed seat it can take (no overlapping
//!   appointment, not already in the slot): the seat taken by the same conditional update as a
//!   booking, a hold made for the patient (`WAITLIST_OFFER_SECS`), the entry `OFFERED`, all
//!   under a savepoint, so a waiter the database refuses (a booking of its own that raced in)
//!   passes the seat to the next without failing the release.
//! - Confirming the offer fulfils the entry; an offer that expires or is cancelled lapses it, and
//!   its seat is offered on the same way.
//! - Joining locks the day's slots, then offers a free seat at once if there is one: a release
//!   that committed just before the join is seen by it, and one that commits just after finds the
//!   entry waiting. Either way a free seat and a waiter who can take it never stay apart.

use chrono::{DateTime, NaiveDate, Utc};
use sea_orm::TransactionTrait;

use super::{
    acting_for,
    changes::Changes,
    input::{parse_id, parse_idempotency_key},
    retrying, BookingService,
};
use crate::{
    auth::{Caller, Role},
    db::{
        appointments::{self, InsertError, NewAppointment},
        doctors,
        entity::{time_slot, waitlist_entry},
        micros, slots,
        waitlist::{self, Filter, JoinError, NewEntry},
        StoreError, WriteTransaction,
    },
    error::{Field, Outcome, Refusal, RefusalCode, ServiceError},
    model::{doctor_day, AppointmentEvent, AppointmentStatus, WaitlistStatus},
};

/// Most entries `myWaitlist` returns (newest first).
pub const MY_WAITLIST_LIMIT: u64 = 500;

/// A join request as the caller sent it.
#[derive(Clone, Debug)]
pub struct JoinRequest {
    /// The doctor.
    pub doctor_id: String,
    /// The day, in the doctor's zone.
    pub date: NaiveDate,
    /// The caller's idempotency key (the waitlist's own key space).
    pub idempotency_key: String,
    /// The patient, for partners and admins.
    pub patient_id: Option<String>,
}

/// The answer to a join.
#[derive(Clone, Debug)]
pub struct Joined {
    /// The entry as it is now (`OFFERED` at once when a seat was free).
    pub entry: waitlist_entry::Model,
    /// True when this answers a retry of an earlier join.
    pub replayed: bool,
}

/// The answer to a leave.
#[derive(Clone, Debug)]
pub struct Left {
    /// The entry as it is now.
    pub entry: waitlist_entry::Model,
    /// True when this call made it `LEFT`; false when it was not waiting.
    pub left: bool,
}

impl BookingService {
    /// Puts a patient on the waitlist of a doctor's day.
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope(), doctor = %req.doctor_id))]
    pub async fn join_waitlist(&self, caller: &Caller, req: &JoinRequest) -> Outcome<Joined> {
        let patient_id = match acting_for(caller, req.patient_id.as_deref(), "join waitlists")? {
            Ok(id) => id,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let doctor_id = match parse_id(Field::DoctorId.name(), &req.doctor_id) {
            Ok(id) => id,
            Err(msg) => return Ok(Err(Refusal::invalid(Field::DoctorId.in_request(), msg))),
        };
        let key = match parse_idempotency_key(&req.idempotency_key) {
            Ok(k) => k,
            Err(msg) => return Ok(Err(Refusal::invalid(Field::IdempotencyKey.in_request(), msg))),
        };
        let scope = caller.scope();
        let date = req.date.format("%Y-%m-%d").to_string();
        let fingerprint = super::input::waitlist_fingerprint(doctor_id, &date, patient_id);
        if let Some(answer) = self.replay_join(&scope, key, &fingerprint).await? {
            return Ok(answer);
        }
        let Some(doctor) = doctors::find(self.db.conn(), doctor_id).await? else {
            return Ok(Err(Refusal::invalid(Field::DoctorId.in_request(), "no doctor with this id")));
        };
        let day = doctor_day(doctor.id, &doctor.timezone, req.date).map_err(StoreError::Inconsistent)?;
        if day.to <= Utc::now() {
            return Ok(Err(Refusal::invalid(Field::Date.in_request(), "this date has already ended")));
        }
        let new = NewEntry {
            day,
            date: &date,
            patient_id,
            booked_by: &scope,
            idempotency_key: key,
            request_hash: &fingerprint,
            created_at: micros(Utc::now()),
        };
        let joined = retrying(|| async {
            let now = micros(Utc::now());
            let tx = self.db.begin_write().await?;
            let entry = match waitlist::insert(&tx, &NewEntry { created_at: now, ..new.clone() }).await {
                Ok(e) => e,
                Err(JoinError::Store(e)) => return Err(e),
                Err(refused) => {
                    tx.rollback().await?;
                    return Ok(Err(refused));
                }
            };
            // The day's slots locked: a release in flight commits first and is seen below, or
            // waits for this join and then finds the entry.
            let day_slots = slots::starting_in(&tx, day.doctor_id, day.from, day.to).await?;
            slots::lock(&tx, &day_slots.iter().map(|s| s.id).collect::<Vec<_>>()).await?;
            let mut changes = Changes::default();
            let free: Vec<time_slot::Model> =
                slots::find_many(&tx, &day_slots.iter().map(|s| s.id).collect::<Vec<_>>()).await?;
            let mut free: Vec<_> = free.into_iter().filter(|s| bookable(s, now)).collect();
            free.sort_unstable_by_key(|s| (s.start_at, s.id));
            for slot in &free {
                if self.offer(&tx, &mut changes, &entry, slot, now).await? {
                    break;
                }
            }
            changes.record(&tx, now).await?;
            tx.commit().await?;
            Ok(Ok((entry.id, changes)))
        })
        .await?;
        let (id, changes) = match joined {
            Ok(done) => done,
            Err(JoinError::AlreadyWaiting) => {
                return Ok(Err(Refusal::new(
                    RefusalCode::AlreadyOnWaitlist,
                    "this patient already waits (or holds an offer) for this doctor and day",
                )))
            }
            Err(_) => {
                // The key raced: the join that holds it committed first.
                return match self.replay_join(&scope, key, &fingerprint).await? {
                    Some(answer) => Ok(answer),
                    None => Err(StoreError::Inconsistent("waitlist key taken but not found".into()).into()),
                };
            }
        };
        self.committed(&changes).await;
        let entry =
            waitlist::find(self.db.conn(), id).await?.ok_or_else(|| StoreError::Inconsistent("entry gone".into()))?;
        Ok(Ok(Joined { entry, replayed: false }))
    }

    /// Takes a `WAITING` entry off the waitlist. An `OFFERED` one leaves by cancelling its offer.
    pub async fn leave_waitlist(&self, caller: &Caller, raw_id: &str) -> Outcome<Left> {
        if caller.role == Role::Doctor {
            return Err(ServiceError::Forbidden("doctors have no waitlist entries".into()));
        }
        let id = match parse_id(Field::Id.name(), raw_id) {
            Ok(id) => id,
            Err(msg) => return Ok(Err(Refusal::invalid(Field::Id.as_param(), msg))),
        };
        // Unknown ids and others' entries answer alike, so ids reveal nothing.
        let Some(entry) = waitlist::find(self.db.conn(), id).await?.filter(|e| may_see(caller, e)) else {
            return Ok(Err(Refusal::invalid(Field::Id.as_param(), "no waitlist entry with this id")));
        };
        let now = micros(Utc::now());
        let left = {
            let _writing = self.db.writing().await;
            waitlist::mark_left(self.db.conn(), entry.id, now).await?
        };
        Ok(Ok(match left {
            Some(entry) => Left { entry, left: true },
            None => Left { entry, left: false },
        }))
    }

    /// The caller's entries, newest first: a patient's own, a partner's it made, every entry for
    /// an admin.
    pub async fn my_waitlist(&self, caller: &Caller) -> Result<Vec<waitlist_entry::Model>, ServiceError> {
        let filter = match caller.role {
            Role::Patient => Filter::Patient(caller.patient_id.ok_or(ServiceError::Unauthenticated)?),
            Role::Partner => Filter::BookedBy(caller.scope()),
            Role::Admin => Filter::All,
            Role::Doctor => return Err(ServiceError::Forbidden("doctors have no waitlist entries".into())),
        };
        Ok(waitlist::list(self.db.conn(), filter, MY_WAITLIST_LIMIT).await?)
    }

    async fn replay_join(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
    ) -> Result<Option<Result<Joined, Refusal>>, ServiceError> {
        let Some(entry) = waitlist::find_by_key(self.db.conn(), scope, key).await? else {
            return Ok(None);
        };
        if entry.request_hash != fingerprint {
            return Ok(Some(Err(Refusal::key_reused(Field::IdempotencyKey.in_request()))));
        }
        Ok(Some(Ok(Joined { entry, replayed: true })))
    }

    /// After a release in `tx`: lapses the offers among `gone`, then offers every seat the
    /// transaction freed to the waiters of its day, oldest first.
    pub(super) async fn offer_freed(
        &self,
        tx: &WriteTransaction,
        changes: &mut Changes,
        gone: &[i64],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        waitlist::settle_offers(tx, gone, WaitlistStatus::Lapsed, now).await?;
        let freed: Vec<_> = changes.freed().into_iter().filter(|(s, _)| bookable(s, now)).collect();
        if freed.is_empty() {
            return Ok(());
        }
        let slots: Vec<time_slot::Model> = freed.iter().map(|(s, _)| s.clone()).collect();
        let mut waiters = waitlist::waiting_for(tx, &slots).await?;
        for (slot, seats) in freed {
            for _ in 0..seats {
                let mut offered = None;
                for (i, entry) in waiters.iter().enumerate() {
                    let waits_for_this_day = entry.doctor_id == slot.doctor_id
                        && entry.day_from <= slot.start_at
                        && slot.start_at < entry.day_to;
                    if waits_for_this_day && self.offer(tx, changes, entry, &slot, now).await? {
                        offered = Some(i);
                        break;
                    }
                }
                match offered {
                    Some(i) => {
                        waiters.remove(i);
                    }
                    // Nobody (left) who can take this seat: it stays free.
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// Offers `slot`'s seat to `entry`'s patient under a savepoint: the conditional update, the
    /// hold and the entry's transition, or nothing. False when the patient cannot take it.
    async fn offer(
        &self,
        tx: &WriteTransaction,
        changes: &mut Changes,
        entry: &waitlist_entry::Model,
        slot: &time_slot::Model,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let conflicts =
            appointments::conflicts(tx, entry.patient_id, (slot.start_at, slot.end_at), &[slot.id], None).await?;
        if conflicts.holds_seat || conflicts.overlaps {
            return Ok(false);
        }
        let savepoint = tx.transaction().begin().await?;
        let taken = slots::take_seats(&savepoint, &[slot.id], now).await?;
        if taken.is_empty() {
            savepoint.rollback().await?;
            return Ok(false);
        }
        // A key no caller can send (callers' keys have no spaces), unique per entry.
        let key = format!("waitlist offer {}", entry.id);
        let new = NewAppointment {
            status: AppointmentStatus::Held,
            patient_id: entry.patient_id,
            booked_by: &entry.booked_by,
            idempotency_key: &key,
            request_hash: "waitlist-offer",
            created_at: now,
            expires_at: Some(micros(now + self.offer_ttl)),
            rescheduled_from: None,
            first_booked_by: None,
        };
        let hold = match appointments::insert(&savepoint, &new, &taken).await {
            Ok(a) => a,
            Err(InsertError::Store(e)) => return Err(e),
            Err(_) => {
                savepoint.rollback().await?;
                return Ok(false);
            }
        };
        if !waitlist::mark_offered(&savepoint, entry.id, hold.id, now).await? {
            savepoint.rollback().await?;
            return Ok(false);
        }
        savepoint.commit().await?;
        changes.taken(&taken);
        changes.event(AppointmentEvent::Offered, &hold, true);
        metrics::counter!("waitlist_offers_total").increment(1);
        Ok(true)
    }
}

/// Whether a seat of `slot` could be taken now.
fn bookable(slot: &time_slot::Model, now: DateTime<Utc>) -> bool {
    slot.available() > 0 && slot.start_at > now
}

/// Whether `caller` may see and change `entry`: the patient's own, one a partner made, any for
/// an admin.
fn may_see(caller: &Caller, entry: &waitlist_entry::Model) -> bool {
    match caller.role {
        Role::Admin => true,
        Role::Patient => caller.patient_id == Some(entry.patient_id),
        Role::Partner => entry.booked_by == caller.scope(),
        Role::Doctor => false,
    }
}
