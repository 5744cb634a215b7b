//! Per-request DataLoaders: a page of N objects costs one statement per relation, not N.

use std::{collections::HashMap, sync::Arc};

use async_graphql::dataloader::{DataLoader, Loader};

use crate::{
    db::{
        appointments::{self, AppointmentRecord, Filter},
        doctors,
        entity::{doctor, time_slot},
        slots, Db, StoreError,
    },
    model::DayRange,
};

/// Loads doctors by id (`Slot.doctor`).
pub struct DoctorLoader(Db);

impl Loader<i64> for DoctorLoader {
    type Value = doctor::Model;
    type Error = Arc<StoreError>;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, Self::Value>, Self::Error> {
        let rows = doctors::find_many(self.0.conn(), keys).await.map_err(Arc::new)?;
        Ok(rows.into_iter().map(|d| (d.id, d)).collect())
    }
}

/// Loads slots by id (`Appointment.slot`).
pub struct SlotLoader(Db);

impl Loader<i64> for SlotLoader {
    type Value = time_slot::Model;
    type Error = Arc<StoreError>;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, Self::Value>, Self::Error> {
        let rows = slots::find_many(self.0.conn(), keys).await.map_err(Arc::new)?;
        Ok(rows.into_iter().map(|s| (s.id, s)).collect())
    }
}

/// Loads the slots of doctors' days (`Doctor.slots(date)`).
pub struct DaySlotsLoader(Db);

impl Loader<DayRange> for DaySlotsLoader {
    type Value = Vec<time_slot::Model>;
    type Error = Arc<StoreError>;

    async fn load(&self, keys: &[DayRange]) -> Result<HashMap<DayRange, Self::Value>, Self::Error> {
        let rows = slots::in_ranges(self.0.conn(), keys).await.map_err(Arc::new)?;
        let mut out: HashMap<DayRange, Self::Value> = keys.iter().map(|k| (*k, Vec::new())).collect();
        for row in rows {
            for key in keys {
                if key.doctor_id == row.doctor_id && key.from <= row.start_at && row.start_at < key.to {
                    if let Some(list) = out.get_mut(key) {
                        list.push(row.clone());
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Loads the further slots of longer appointments (`Appointment.slots`), by start.
pub struct FurtherSlotsLoader(Db);

impl Loader<i64> for FurtherSlotsLoader {
    type Value = Vec<i64>;
    type Error = Arc<StoreError>;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, Self::Value>, Self::Error> {
        let mut out: HashMap<i64, Vec<i64>> = HashMap::new();
        for (appointment, slot) in appointments::further_slots(self.0.conn(), keys).await.map_err(Arc::new)? {
            out.entry(appointment).or_default().push(slot);
        }
        Ok(out)
    }
}

/// Loads appointments with their doctor by id (`rescheduledFrom`/`rescheduledTo`; the caller's
/// visibility is checked on each).
pub struct AppointmentLoader(Db);

impl Loader<i64> for AppointmentLoader {
    type Value = AppointmentRecord;
    type Error = Arc<StoreError>;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, Self::Value>, Self::Error> {
        let limit = keys.len() as u64;
        let rows = appointments::list(self.0.conn(), Filter::Ids(keys.to_vec()), limit).await.map_err(Arc::new)?;
        Ok(rows.into_iter().map(|r| (r.appointment.id, r)).collect())
    }
}

/// The loaders of one request; made fresh per request so nothing is cached across requests.
pub struct Loaders {
    /// Doctors by id.
    pub doctors: DataLoader<DoctorLoader>,
    /// Slots by id.
    pub slots: DataLoader<SlotLoader>,
    /// Slots by doctor's day.
    pub day_slots: DataLoader<DaySlotsLoader>,
    /// Further slots of longer appointments.
    pub further_slots: DataLoader<FurtherSlotsLoader>,
    /// Appointments by id.
    pub appointments: DataLoader<AppointmentLoader>,
}

impl Loaders {
    /// Fresh loaders on `db`.
    pub fn new(db: &Db) -> Self {
        Self {
            doctors: DataLoader::new(DoctorLoader(db.clone()), tokio::spawn),
            slots: DataLoader::new(SlotLoader(db.clone()), tokio::spawn),
            day_slots: DataLoader::new(DaySlotsLoader(db.clone()), tokio::spawn),
            further_slots: DataLoader::new(FurtherSlotsLoader(db.clone()), tokio::spawn),
            appointments: DataLoader::new(AppointmentLoader(db.clone()), tokio::spawn),
        }
    }
}
