//! The states of an appointment and the events that move it, as stored (upper-case words in
//! `appointment.status`, `appointment.cancelled_by` and `outbox.kind`).

use chrono::{DateTime, Utc};

/// Where an appointment is in its life. `Held` and `Booked` take a seat; the others gave it back.
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
}

impl AppointmentStatus {
    /// Every status, in the order of an appointment's life.
    pub const ALL: [Self; 4] = [Self::Held, Self::Booked, Self::Cancelled, Self::Expired];

    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "HELD",
            Self::Booked => "BOOKED",
            Self::Cancelled => "CANCELLED",
            Self::Expired => "EXPIRED",
        }
    }

    /// The status a stored word names.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }

    /// Whether an appointment in this status takes a seat.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Held | Self::Booked)
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
}

impl AppointmentEvent {
    /// Every event.
    pub const ALL: [Self; 7] =
        [Self::Booked, Self::Held, Self::Confirmed, Self::Cancelled, Self::Expired, Self::Rescheduled, Self::Offered];

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
        }
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
        assert!(AppointmentStatus::Held.is_active() && !AppointmentStatus::Expired.is_active());
    }
}
