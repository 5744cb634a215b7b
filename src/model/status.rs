//! The states of an appointment and the events that move it, as stored (upper-case words in
//! `appointment.status`, `appointment.cancelled_by` and `outbox.kind`).

use chrono::{DateTime, Utc};

/// Where an appointment is in its life. Which statuses take a seat, which count for the
/// overlap rule and which may still be moved is written once, in [`LIFECYCLE`]; the allowed
/// moves in [`TRANSITIONS`]. The code and the SQL derive their lists from these two tables,
/// and the migrations' lists are checked against them by a test (`db::appointments`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AppointmentStatus {
    /// A seat kept until `expires_at`, waiting for a confirm.
    Held,
    /// A confirmed seat.
    Booked,
    /// Cancelled (by the patient, a partner or the clinic, or moved by a reschedule).
    Cancelled,
    /// A hold that was not confirmed in time.
    Expired,
    /// The patient checked in at the desk (`arrived_at`).
    Arrived,
    /// The patient was seen (`completed_at`).
    Fulfilled,
    /// The patient did not come.
    NoShow,
}

/// One row of the lifecycle table: what a status means for seats, overlaps and moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusRule {
    /// The status.
    pub status: AppointmentStatus,
    /// The stored word (`appointment.status`).
    pub word: &'static str,
    /// Its seats are counted in the slots' `booked_count`. A seat never goes back from a
    /// status that the desk reached: the visit's time is spent.
    pub holds_seat: bool,
    /// It counts for the overlap rule (the exclusion constraint's predicate), for
    /// `ALREADY_BOOKED` and for whether a waitlist offer can go to the patient. Every status
    /// that holds a seat does: an arrived, seen or missed visit still occupies its time.
    pub overlaps: bool,
    /// It is still ahead and may be cancelled, rescheduled or closed away (the API's
    /// "active": `APPOINTMENT_NOT_ACTIVE` names the others).
    pub open: bool,
}

/// The lifecycle table, in the order of an appointment's life (the API enum's order).
pub const LIFECYCLE: [StatusRule; 7] = {
    use AppointmentStatus as S;
    const fn row(status: S, word: &'static str, holds_seat: bool, open: bool) -> StatusRule {
        StatusRule { status, word, holds_seat, overlaps: holds_seat, open }
    }
    [
        row(S::Held, "HELD", true, true),
        row(S::Booked, "BOOKED", true, true),
        row(S::Cancelled, "CANCELLED", false, false),
        row(S::Expired, "EXPIRED", false, false),
        row(S::Arrived, "ARRIVED", true, false),
        row(S::Fulfilled, "FULFILLED", true, false),
        row(S::NoShow, "NOSHOW", true, false),
    ]
};

/// The allowed moves `(from, to)`: every conditional `UPDATE … WHERE status = …` of the
/// service is one of them (a reschedule cancels the old appointment and inserts a new one).
pub const TRANSITIONS: [(AppointmentStatus, AppointmentStatus); 7] = {
    use AppointmentStatus as S;
    [
        (S::Held, S::Booked),
        (S::Held, S::Cancelled),
        (S::Held, S::Expired),
        (S::Booked, S::Cancelled),
        (S::Booked, S::Arrived),
        (S::Booked, S::NoShow),
        (S::Arrived, S::Fulfilled),
    ]
};

impl AppointmentStatus {
    /// Every status, in the order of an appointment's life.
    pub const ALL: [Self; 7] =
        [Self::Held, Self::Booked, Self::Cancelled, Self::Expired, Self::Arrived, Self::Fulfilled, Self::NoShow];

    /// This status's row of [`LIFECYCLE`].
    pub fn rule(self) -> &'static StatusRule {
        // The table follows the enum's order (checked by the unit test below).
        &LIFECYCLE[self as usize]
    }

    /// The stored word.
    pub fn as_str(self) -> &'static str {
        self.rule().word
    }

    /// The status a stored word names.
    pub fn parse(raw: &str) -> Option<Self> {
        LIFECYCLE.iter().find(|r| r.word == raw).map(|r| r.status)
    }

    /// Whether an appointment in this status takes a seat.
    pub fn holds_seat(self) -> bool {
        self.rule().holds_seat
    }

    /// Whether it may still be cancelled, rescheduled or closed away.
    pub fn is_open(self) -> bool {
        self.rule().open
    }

    /// Whether the lifecycle allows moving from this status to `to`.
    pub fn may_become(self, to: Self) -> bool {
        TRANSITIONS.contains(&(self, to))
    }

    /// The stored words of the statuses `pick` selects, in the table's order.
    pub fn words(pick: impl Fn(&StatusRule) -> bool) -> Vec<&'static str> {
        LIFECYCLE.iter().filter(|r| pick(r)).map(|r| r.word).collect()
    }

    /// The same as an SQL list, `('HELD', 'BOOKED')`, to write into statements' text (a
    /// partial index is used only when its predicate is provable from the text itself).
    pub fn sql_list(pick: impl Fn(&StatusRule) -> bool) -> String {
        let quoted: Vec<String> = Self::words(pick).into_iter().map(|w| format!("'{w}'")).collect();
        format!("({})", quoted.join(", "))
    }
}

/// Who cancelled an appointment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CancelledBy {
    /// The patient itself.
    Patient,
    /// A partner acting for the patient.
    Partner,
    /// The clinic: a doctor or an admin (closing slots included).
    Clinic,
}

impl CancelledBy {
    /// Every value.
    pub const ALL: [Self; 3] = [Self::Patient, Self::Partner, Self::Clinic];

    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Patient => "PATIENT",
            Self::Partner => "PARTNER",
            Self::Clinic => "CLINIC",
        }
    }

    /// The value a stored word names.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

/// What an outbox row tells about an appointment, besides the slot change it may carry. The
/// relay publishes the slot change to live subscribers and turns the event into messages
/// (emails, SMS, partner webhooks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AppointmentEvent {
    /// A seat was booked.
    Booked,
    /// A seat was held until `expires_at`.
    Held,
    /// A hold became a booking.
    Confirmed,
    /// An appointment was cancelled (`cancelled_by` says by whom).
    Cancelled,
    /// A hold ran out.
    Expired,
    /// The row's appointment replaces the one it was `rescheduled_from`.
    Rescheduled,
    /// A freed seat was held for a patient on the waitlist.
    Offered,
    /// The patient checked in at the desk.
    Arrived,
    /// The patient was seen.
    Fulfilled,
    /// The patient did not come.
    NoShow,
}

impl AppointmentEvent {
    /// Every event.
    pub const ALL: [Self; 10] = [
        Self::Booked,
        Self::Held,
        Self::Confirmed,
        Self::Cancelled,
        Self::Expired,
        Self::Rescheduled,
        Self::Offered,
        Self::Arrived,
        Self::Fulfilled,
        Self::NoShow,
    ];

    /// The stored word (`outbox.kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Booked => "BOOKED",
            Self::Held => "HELD",
            Self::Confirmed => "CONFIRMED",
            Self::Cancelled => "CANCELLED",
            Self::Expired => "EXPIRED",
            Self::Rescheduled => "RESCHEDULED",
            Self::Offered => "OFFERED",
            Self::Arrived => "ARRIVED",
            Self::Fulfilled => "FULFILLED",
            Self::NoShow => "NOSHOW",
        }
    }

    /// Whether the patient is told of it (email, SMS). The desk's events are not: the patient
    /// was there (or was not), and the partners' webhooks carry them.
    pub fn tells_patient(self) -> bool {
        !matches!(self, Self::Arrived | Self::Fulfilled | Self::NoShow)
    }

    /// The event a stored word names; `None` for a row that only carries a slot change.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

/// The fields of an appointment that change after it is made, as one event's transaction left
/// them. The outbox row of the event carries them, so what the event's messages and webhooks
/// say is what the event did, whatever happened to the appointment after it (a booking
/// cancelled a millisecond later is still told as booked).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AppointmentState {
    /// Its status.
    pub status: AppointmentStatus,
    /// Until when a hold keeps its seat (set while held, kept on expiry).
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was cancelled.
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Who cancelled it.
    pub cancelled_by: Option<CancelledBy>,
    /// The appointment that replaced it.
    pub rescheduled_to: Option<i64>,
}

/// Where a waitlist entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitlistStatus {
    /// Waiting for a seat.
    Waiting,
    /// A freed seat is held for the patient (the entry's offer).
    Offered,
    /// The offer was confirmed.
    Fulfilled,
    /// The offer expired or was cancelled.
    Lapsed,
    /// The patient stopped waiting.
    Left,
}

impl WaitlistStatus {
    /// Every status.
    pub const ALL: [Self; 5] = [Self::Waiting, Self::Offered, Self::Fulfilled, Self::Lapsed, Self::Left];

    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "WAITING",
            Self::Offered => "OFFERED",
            Self::Fulfilled => "FULFILLED",
            Self::Lapsed => "LAPSED",
            Self::Left => "LEFT",
        }
    }

    /// The status a stored word names.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

/// `outbox.kind` of a row that carries a slot change and no appointment event of its own (the
/// further slots of a longer appointment, a closed slot).
pub const SLOT_ONLY: &str = "SLOT";

/// `outbox.kind` of a row that tells every instance a doctor's schedule gained slots: no slot
/// changed (so no live event), but the slot lists kept of that doctor are out of date.
pub const SCHEDULE_PUBLISHED: &str = "SCHEDULE";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_words_round_trip() {
        for s in AppointmentStatus::ALL {
            assert_eq!(AppointmentStatus::parse(s.as_str()), Some(s));
        }
        for c in CancelledBy::ALL {
            assert_eq!(CancelledBy::parse(c.as_str()), Some(c));
        }
        for e in AppointmentEvent::ALL {
            assert_eq!(AppointmentEvent::parse(e.as_str()), Some(e));
        }
        for w in WaitlistStatus::ALL {
            assert_eq!(WaitlistStatus::parse(w.as_str()), Some(w));
        }
        assert_eq!(AppointmentEvent::parse(SLOT_ONLY), None);
        assert_eq!(AppointmentEvent::parse(SCHEDULE_PUBLISHED), None);
        assert!(AppointmentStatus::Held.holds_seat() && !AppointmentStatus::Expired.holds_seat());
    }

    #[test]
    fn the_lifecycle_table_is_whole_and_consistent() {
        assert_eq!(LIFECYCLE.len(), AppointmentStatus::ALL.len());
        for (row, status) in LIFECYCLE.iter().zip(AppointmentStatus::ALL) {
            assert_eq!(row.status, status, "the table follows the enum's order");
            assert_eq!(status.rule(), row);
        }
        for row in LIFECYCLE {
            // Open statuses take a seat, and a seat is only given back by leaving them.
            assert!(!row.open || row.holds_seat, "{}", row.word);
            assert_eq!(row.overlaps, row.holds_seat, "{}", row.word);
        }
        for (from, to) in TRANSITIONS {
            // No move puts a seat back into use: seats are taken only by inserts.
            assert!(from.holds_seat() || !to.holds_seat(), "{from:?} -> {to:?}");
            // Only open statuses give seats back.
            if from.holds_seat() && !to.holds_seat() {
                assert!(from.is_open(), "{from:?} -> {to:?}");
            }
        }
        assert_eq!(AppointmentStatus::sql_list(|r| r.open), "('HELD', 'BOOKED')");
        assert!(AppointmentStatus::Booked.may_become(AppointmentStatus::Arrived));
        assert!(!AppointmentStatus::Arrived.may_become(AppointmentStatus::Cancelled));
    }
}
