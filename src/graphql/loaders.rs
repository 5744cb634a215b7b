//! Per-request DataLoaders: a page of N objects costs one statement per relation, not N.

use std::{collections::HashMap, sync::Arc};

use async_graphql::dataloader::{DataLoader, Loader};

use crate::{
    db::{
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

/// The loaders of one request; made fresh per request so nothing is cached across requests.
pub struct Loaders {
    /// Doctors by id.
    pub doctors: DataLoader<DoctorLoader>,
    /// Slots by id.
    pub slots: DataLoader<SlotLoader>,
    /// Slots by doctor's day.
    pub day_slots: DataLoader<DaySlotsLoader>,
}

impl Loaders {
    /// Fresh loaders on `db`.
    pub fn new(db: &Db) -> Self {
        Self {
            doctors: DataLoader::new(DoctorLoader(db.clone()), tokio::spawn),
            slots: DataLoader::new(SlotLoader(db.clone()), tokio::spawn),
            day_slots: DataLoader::new(DaySlotsLoader(db.clone()), tokio::spawn),
        }
    }
}
