//! The SMART Scheduling Links feed: every doctor's `Location`/`PractitionerRole`/`Schedule`
//! lines and one `Slot` file per doctor, kept rendered and gzipped in memory, so an
//! aggregator's poll costs a lookup and a copy, never a query.
//!
//! How it stays fresh without slowing bookings:
//! - It is built on the first feed request (not at start-up: an instance nobody polls spends
//!   nothing), from the database in batches of doctors, through the pool.
//! - Every committed slot change reaches every instance's bus, and the bus tells the feed
//!   ([`FeedObserver`], a [`ChangeObserver`]): the change is noted in an inbox in O(1), nothing
//!   else happens on the booking's path. Each slot's `version` orders its changes, so a change
//!   that arrives late or twice is dropped.
//! - A refresh task wakes every `FHIR_FEED_REFRESH_MS`: it applies the inbox to the slots in
//!   memory, asks the database for the highest doctor and slot ids (one cheap statement: new
//!   doctors and published schedules send no change), loads what was added, drops slots that
//!   have started, and re-renders only the files that changed. So a file is rendered at most
//!   once per refresh, however many bookings hit it.
//! - When changes may have been missed (Redis came back after an outage) and every
//!   `FHIR_FEED_RESYNC_SECS`, the feed is rebuilt from the database; the old snapshot is served
//!   meanwhile.
//!
//! A snapshot is immutable; requests take the current one (an `Arc`). Each file has a strong
//! `ETag` (a hash of its bytes, the same on every instance holding the same data).

use std::{
    collections::{BTreeMap, HashMap},
    io::Write,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, PoisonError, Weak,
    },
    time::{Duration, Instant},
};

use axum::body::Bytes;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use flate2::{write::GzEncoder, Compression};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::{
    map::{self, MapSettings, SlotFacts},
    resources::Resource,
};
use crate::{
    db::{self, entity::doctor, Db, StoreError},
    model::{ChangeObserver, SlotChange},
};

/// Doctors read per statement of a full build.
const BUILD_BATCH: usize = 100;
/// Changes of slots the feed does not hold (yet) kept for when their rows arrive.
const PENDING_MAX: usize = 100_000;
/// Longest wait of a request for the first build.
const FIRST_BUILD_WAIT: Duration = Duration::from_secs(60);
/// Manifests kept rendered per snapshot (one per public base URL seen).
const MANIFESTS_KEPT: usize = 8;

/// How the feed is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedSettings {
    /// How often committed changes are applied and new rows looked for.
    pub refresh: Duration,
    /// How often the feed is rebuilt as a whole (`None`: only when changes may have been missed).
    pub resync: Option<Duration>,
    /// How the resources look.
    pub map: MapSettings,
}

/// One rendered file: gzipped NDJSON (or JSON), its strong validator and sizes.
#[derive(Debug)]
pub struct Rendered {
    /// The gzip stream.
    pub gz: Bytes,
    /// A hash of the content, without quotes: `ETag` is `"{hash}"` for the identity and
    /// `"{hash}.gz"` for the gzip encoding.
    pub hash: String,
    /// Bytes before compression.
    pub raw_len: usize,
    /// Resources (lines) in it.
    pub lines: usize,
}

impl Rendered {
    /// Compresses `raw` in one go (one call into the compressor costs far less than one per
    /// JSON fragment) and hashes the result.
    fn compress(raw: &[u8], lines: usize) -> Self {
        // Level 1: a fraction of the CPU of the default for files a little larger; a doctor's
        // file is rendered again on every change of its slots.
        let mut gz = GzEncoder::new(Vec::with_capacity(raw.len() / 8 + 64), Compression::fast());
        let _ = gz.write_all(raw);
        let gz = gz.finish().unwrap_or_default();
        let hash = hex::encode(&Sha256::digest(&gz)[..12]);
        Self { gz: Bytes::from(gz), hash, raw_len: raw.len(), lines }
    }

    /// Renders `value` as JSON.
    pub fn json(value: &impl Serialize) -> Self {
        let raw = serde_json::to_vec(value).unwrap_or_default();
        Self::compress(&raw, 1)
    }

    /// The uncompressed bytes (for a client that does not take gzip).
    pub fn identity(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.raw_len);
        let mut decoder = flate2::write::GzDecoder::new(&mut out);
        let _ = decoder.write_all(&self.gz);
        let _ = decoder.finish();
        out
    }
}

/// Writes one resource per line.
fn ndjson(resources: impl Iterator<Item = Resource>) -> Rendered {
    let mut raw = Vec::new();
    let mut lines = 0;
    for r in resources {
        let _ = serde_json::to_writer(&mut raw, &r);
        raw.push(b'\n');
        lines += 1;
    }
    Rendered::compress(&raw, lines)
}

/// The kind of a feed file (the manifest's `output.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FileKind {
    /// The clinic.
    Location,
    /// Every doctor's role.
    PractitionerRole,
    /// Every doctor's schedule.
    Schedule,
    /// One doctor's slots.
    Slot,
}

impl FileKind {
    /// The resource type.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Location => "Location",
            Self::PractitionerRole => "PractitionerRole",
            Self::Schedule => "Schedule",
            Self::Slot => "Slot",
        }
    }
}

/// One file of a snapshot.
#[derive(Clone, Debug)]
pub struct FeedFile {
    /// Its name under `/fhir/$bulk-publish/`.
    pub name: String,
    /// What it holds.
    pub kind: FileKind,
    /// When its content last changed by a commit or new rows (not by slots that started).
    pub changed_at: DateTime<Utc>,
    /// The bytes.
    pub rendered: Arc<Rendered>,
}

/// The feed as of one refresh: immutable, shared by the requests that read it.
#[derive(Debug)]
pub struct Snapshot {
    /// When it was made: every change applied before is in it (`transactionTime`).
    pub transaction_time: DateTime<Utc>,
    /// Since when the feed knows when each file changed (its last full build); `_since`
    /// before this lists every file.
    pub horizon: DateTime<Utc>,
    /// The files, in manifest order: Location, PractitionerRole, Schedule, then the doctors'
    /// Slot files by doctor id.
    pub files: Vec<FeedFile>,
    by_name: HashMap<String, usize>,
    /// Rendered manifests, by public base URL.
    manifests: Mutex<Vec<(String, Arc<Rendered>)>>,
}

impl Snapshot {
    /// A file by name.
    pub fn file(&self, name: &str) -> Option<&FeedFile> {
        self.by_name.get(name).and_then(|i| self.files.get(*i))
    }

    /// The manifest for `base` (the absolute `/fhir` URL), rendered once per base.
    pub fn manifest(&self, base: &str, render: impl FnOnce() -> Rendered) -> Arc<Rendered> {
        let mut kept = self.manifests.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, r)) = kept.iter().find(|(b, _)| b == base) {
            return Arc::clone(r);
        }
        let r = Arc::new(render());
        if kept.len() >= MANIFESTS_KEPT {
            kept.remove(0);
        }
        kept.push((base.to_owned(), Arc::clone(&r)));
        r
    }
}

/// Committed changes waiting for the next refresh, coalesced per slot.
#[derive(Default)]
struct Inbox {
    /// Set once the first build has begun: changes before it are in the rows it reads.
    listening: AtomicBool,
    /// Changes may have been missed: rebuild.
    missed: AtomicBool,
    changes: Mutex<HashMap<i64, SlotChange>>,
}

/// The feed's ear on the bus: notes each change in O(1) and returns.
pub struct FeedObserver(Arc<Inbox>);

impl ChangeObserver for FeedObserver {
    fn changed(&self, change: &SlotChange) {
        if !self.0.listening.load(Ordering::Acquire) {
            return;
        }
        let mut changes = self.0.changes.lock().unwrap_or_else(PoisonError::into_inner);
        match changes.get(&change.slot_id) {
            Some(kept) if kept.version >= change.version => {}
            _ => {
                changes.insert(change.slot_id, change.clone());
            }
        }
    }

    fn may_have_missed_changes(&self) {
        self.0.missed.store(true, Ordering::Release);
    }
}

/// The feed of an instance (cheap to clone). Its refresh task ends when the last clone is
/// dropped.
#[derive(Clone)]
pub struct Feed {
    shared: Arc<Shared>,
}

struct Shared {
    db: Db,
    settings: FeedSettings,
    inbox: Arc<Inbox>,
    snapshot: watch::Sender<Option<Arc<Snapshot>>>,
    started: std::sync::Once,
}

/// Why the feed cannot answer now.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The first build has not finished in time (or keeps failing).
    #[error("the feed is being built; retry shortly")]
    NotReady,
}

impl Feed {
    /// A feed on `db`, not yet built.
    pub fn new(db: Db, settings: FeedSettings) -> Self {
        let (snapshot, _) = watch::channel(None);
        let shared = Shared { db, settings, inbox: Arc::default(), snapshot, started: std::sync::Once::new() };
        Self { shared: Arc::new(shared) }
    }

    /// What the bus tells about committed changes.
    pub fn observer(&self) -> Arc<dyn ChangeObserver> {
        Arc::new(FeedObserver(Arc::clone(&self.shared.inbox)))
    }

    /// The settings the resources are rendered with.
    pub fn map_settings(&self) -> &MapSettings {
        &self.shared.settings.map
    }

    /// The current snapshot; the first call starts the build and waits for it.
    pub async fn snapshot(&self) -> Result<Arc<Snapshot>, FeedError> {
        self.shared.started.call_once(|| {
            self.shared.inbox.listening.store(true, Ordering::Release);
            let task = Refresher {
                shared: Arc::downgrade(&self.shared),
                db: self.shared.db.clone(),
                settings: self.shared.settings.clone(),
                inbox: Arc::clone(&self.shared.inbox),
            };
            tokio::spawn(task.run());
        });
        let mut rx = self.shared.snapshot.subscribe();
        let ready = tokio::time::timeout(FIRST_BUILD_WAIT, rx.wait_for(Option::is_some)).await;
        match ready {
            Ok(Ok(s)) => s.as_ref().map(Arc::clone).ok_or(FeedError::NotReady),
            _ => Err(FeedError::NotReady),
        }
    }
}

/// A slot as the feed keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FeedSlot {
    id: i64,
    start_at: DateTime<Utc>,
    end_at: DateTime<Utc>,
    capacity: i32,
    booked: i32,
    version: i64,
    closed: bool,
}

impl From<&db::entity::time_slot::Model> for FeedSlot {
    fn from(s: &db::entity::time_slot::Model) -> Self {
        Self {
            id: s.id,
            start_at: s.start_at,
            end_at: s.end_at,
            capacity: s.capacity,
            booked: s.booked_count,
            version: s.version,
            closed: s.closed_at.is_some(),
        }
    }
}

impl FeedSlot {
    /// Takes `change` when it is newer; true when something changed.
    fn apply(&mut self, change: &SlotChange) -> bool {
        if change.version <= self.version {
            return false;
        }
        self.capacity = change.capacity;
        self.booked = change.booked_count;
        self.closed = change.closed;
        self.version = change.version;
        true
    }
}

/// One doctor and its upcoming slots.
struct DoctorEntry {
    doctor: doctor::Model,
    tz: Tz,
    /// By start (starts are unique per doctor).
    slots: Vec<FeedSlot>,
    file: Option<Arc<Rendered>>,
    dirty: bool,
    changed_at: DateTime<Utc>,
}

impl DoctorEntry {
    fn new(doctor: doctor::Model, at: DateTime<Utc>) -> Self {
        let tz = map::zone(&doctor);
        Self { doctor, tz, slots: Vec::new(), file: None, dirty: true, changed_at: at }
    }

    fn render(&mut self, settings: &MapSettings) {
        self.dirty = false;
        if self.slots.is_empty() {
            self.file = None;
            return;
        }
        let (doctor_id, tz) = (self.doctor.id, self.tz);
        let lines = self.slots.iter().map(|s| {
            let facts = SlotFacts {
                id: s.id,
                doctor_id,
                start_at: s.start_at,
                end_at: s.end_at,
                capacity: s.capacity,
                booked: s.booked,
                closed: s.closed,
            };
            Resource::Slot(map::slot(&facts, tz, settings))
        });
        self.file = Some(Arc::new(ndjson(lines)));
    }

    /// Adds a slot read from the database (kept if already held: the bus's version decides).
    fn insert(&mut self, slot: FeedSlot) {
        match self.slots.binary_search_by_key(&slot.start_at, |s| s.start_at) {
            Ok(i) => {
                if self.slots[i].id == slot.id && slot.version > self.slots[i].version {
                    self.slots[i] = slot;
                }
            }
            Err(i) => self.slots.insert(i, slot),
        }
    }
}

/// The feed's whole state, owned by the refresh task.
struct FeedState {
    doctors: BTreeMap<i64, DoctorEntry>,
    max_doctor_id: i64,
    max_slot_id: i64,
    horizon: DateTime<Utc>,
    /// Each doctor's `scheduledThrough` (its `Schedule.planningHorizon`), read again whenever
    /// slots were added.
    planned: HashMap<i64, chrono::NaiveDate>,
    /// Changes of slots not held (yet): a slot published since the last look, by id.
    pending: HashMap<i64, SlotChange>,
    location: Arc<Rendered>,
    roles: Arc<Rendered>,
    schedules: Arc<Rendered>,
    doctors_changed_at: DateTime<Utc>,
    doctors_dirty: bool,
}

impl FeedState {
    /// Reads everything (doctors, then their upcoming slots in batches) and renders it.
    async fn build(db: &Db, settings: &FeedSettings) -> Result<Self, StoreError> {
        let started = Instant::now();
        let now = Utc::now();
        // The ids first: rows added later are found by the first refresh.
        let (max_doctor_id, max_slot_id) = db::fhir::max_ids(db.conn()).await?;
        let doctors = db::fhir::doctors_after(db.conn(), 0).await?;
        let mut entries: BTreeMap<i64, DoctorEntry> =
            doctors.into_iter().map(|d| (d.id, DoctorEntry::new(d, now))).collect();
        let ids: Vec<i64> = entries.keys().copied().collect();
        let mut slots = 0usize;
        // One batch renders (off the async threads) while the next one is read.
        let mut rendering: Option<tokio::task::JoinHandle<Vec<DoctorEntry>>> = None;
        let failed = |e: tokio::task::JoinError| StoreError::Inconsistent(format!("feed rendering failed: {e}"));
        // Where the time goes: reading rows, and waiting for renders the reads did not hide.
        let (mut reading, mut waiting) = (Duration::ZERO, Duration::ZERO);
        for batch in ids.chunks(BUILD_BATCH) {
            let read = Instant::now();
            let rows = db::fhir::upcoming_slots_of(db, batch, now).await?;
            reading += read.elapsed();
            slots += rows.len();
            let mut batch_entries: Vec<DoctorEntry> = batch.iter().filter_map(|id| entries.remove(id)).collect();
            let index: HashMap<i64, usize> = batch_entries.iter().enumerate().map(|(i, e)| (e.doctor.id, i)).collect();
            for row in &rows {
                if let Some(e) = index.get(&row.doctor_id).and_then(|i| batch_entries.get_mut(*i)) {
                    e.slots.push(FeedSlot::from(row));
                }
            }
            drop(rows);
            if let Some(done) = rendering.take() {
                let wait = Instant::now();
                entries.extend(done.await.map_err(failed)?.into_iter().map(|e| (e.doctor.id, e)));
                waiting += wait.elapsed();
            }
            let map_settings = settings.map.clone();
            rendering = Some(tokio::task::spawn_blocking(move || {
                for e in &mut batch_entries {
                    e.render(&map_settings);
                }
                batch_entries
            }));
        }
        if let Some(done) = rendering.take() {
            entries.extend(done.await.map_err(failed)?.into_iter().map(|e| (e.doctor.id, e)));
        }
        let mut state = Self {
            doctors: entries,
            max_doctor_id,
            max_slot_id,
            horizon: now,
            planned: planned_through(db).await?,
            pending: HashMap::new(),
            location: Arc::new(ndjson(std::iter::once(Resource::Location(map::location(&settings.map))))),
            roles: Arc::new(ndjson(std::iter::empty())),
            schedules: Arc::new(ndjson(std::iter::empty())),
            doctors_changed_at: now,
            doctors_dirty: true,
        };
        state.render_doctors(&settings.map);
        let l = &settings.map.location;
        if l.phone.is_none() || l.address.is_none() {
            tracing::warn!("FHIR_LOCATION_PHONE or FHIR_LOCATION_ADDRESS is unset: SMART aggregators expect both");
        }
        tracing::info!(
            doctors = state.doctors.len(),
            slots,
            seconds = started.elapsed().as_secs_f64(),
            reading_seconds = reading.as_secs_f64(),
            render_wait_seconds = waiting.as_secs_f64(),
            "FHIR feed built"
        );
        metrics::histogram!("fhir_feed_build_seconds").record(started.elapsed().as_secs_f64());
        Ok(state)
    }

    fn render_doctors(&mut self, settings: &MapSettings) {
        if !self.doctors_dirty {
            return;
        }
        self.doctors_dirty = false;
        self.roles = Arc::new(ndjson(
            self.doctors.values().map(|e| Resource::PractitionerRole(map::practitioner_role(&e.doctor, settings))),
        ));
        self.schedules = Arc::new(ndjson(
            self.doctors
                .values()
                .map(|e| Resource::Schedule(map::schedule(&e.doctor, self.planned.get(&e.doctor.id).copied()))),
        ));
    }

    /// Applies committed changes; true when any slot changed.
    fn apply(&mut self, changes: HashMap<i64, SlotChange>, at: DateTime<Utc>) -> bool {
        let mut changed = false;
        for (id, change) in changes {
            let held = self.doctors.get_mut(&change.doctor_id).and_then(|e| {
                let i = e.slots.binary_search_by_key(&change.start_at, |s| s.start_at).ok()?;
                (e.slots[i].id == id).then_some((e, i))
            });
            match held {
                Some((e, i)) => {
                    let applied = e.slots[i].apply(&change);
                    e.dirty |= applied;
                    changed |= applied;
                    if applied {
                        e.changed_at = at;
                    }
                }
                None if change.start_at > at && self.pending.len() < PENDING_MAX => {
                    self.pending.insert(id, change);
                }
                // A slot that has started is not in the feed any more (or too many wait).
                None => {}
            }
        }
        changed
    }

    /// Loads the doctors and slots added since the last look; true when any were.
    async fn load_new(&mut self, db: &Db, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let (max_doctor_id, max_slot_id) = db::fhir::max_ids(db.conn()).await?;
        let mut changed = false;
        if max_doctor_id > self.max_doctor_id {
            for d in db::fhir::doctors_after(db.conn(), self.max_doctor_id).await? {
                self.doctors.entry(d.id).or_insert_with(|| DoctorEntry::new(d, at));
            }
            self.max_doctor_id = max_doctor_id;
            self.doctors_dirty = true;
            self.doctors_changed_at = at;
            changed = true;
        }
        if max_slot_id > self.max_slot_id {
            let rows = db::fhir::upcoming_slots_after(db, self.max_slot_id, at).await?;
            for row in &rows {
                let Some(e) = self.doctors.get_mut(&row.doctor_id) else {
                    // A doctor committed after its slots were read cannot be: doctors come first.
                    continue;
                };
                let mut slot = FeedSlot::from(row);
                if let Some(change) = self.pending.remove(&row.id) {
                    slot.apply(&change);
                }
                e.insert(slot);
                e.dirty = true;
                e.changed_at = at;
            }
            self.max_slot_id = max_slot_id;
            changed = true;
            // Slots were added: horizons may have moved.
            let planned = planned_through(db).await?;
            if planned != self.planned {
                self.planned = planned;
                self.doctors_dirty = true;
                self.doctors_changed_at = at;
            }
        }
        Ok(changed)
    }

    /// Drops the slots that have started; true when any were.
    fn drop_started(&mut self, now: DateTime<Utc>) -> bool {
        let mut changed = false;
        for e in self.doctors.values_mut() {
            let started = e.slots.partition_point(|s| s.start_at <= now);
            if started > 0 {
                e.slots.drain(..started);
                e.dirty = true;
                changed = true;
            }
        }
        self.pending.retain(|_, c| c.start_at > now);
        changed
    }

    /// Renders what changed (off the async threads).
    async fn render(mut self, settings: &MapSettings) -> Self {
        let settings = settings.clone();
        let handle = tokio::task::spawn_blocking(move || {
            for e in self.doctors.values_mut().filter(|e| e.dirty) {
                e.render(&settings);
            }
            self.render_doctors(&settings);
            self
        });
        match handle.await {
            Ok(state) => state,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    fn snapshot(&self, at: DateTime<Utc>) -> Snapshot {
        let mut files = vec![
            FeedFile {
                name: "Location.ndjson".into(),
                kind: FileKind::Location,
                changed_at: self.horizon,
                rendered: Arc::clone(&self.location),
            },
            FeedFile {
                name: "PractitionerRole.ndjson".into(),
                kind: FileKind::PractitionerRole,
                changed_at: self.doctors_changed_at,
                rendered: Arc::clone(&self.roles),
            },
            FeedFile {
                name: "Schedule.ndjson".into(),
                kind: FileKind::Schedule,
                changed_at: self.doctors_changed_at,
                rendered: Arc::clone(&self.schedules),
            },
        ];
        for (id, e) in &self.doctors {
            if let Some(file) = &e.file {
                files.push(FeedFile {
                    name: format!("Slot-{id}.ndjson"),
                    kind: FileKind::Slot,
                    changed_at: e.changed_at,
                    rendered: Arc::clone(file),
                });
            }
        }
        let by_name = files.iter().enumerate().map(|(i, f)| (f.name.clone(), i)).collect();
        Snapshot { transaction_time: at, horizon: self.horizon, files, by_name, manifests: Mutex::default() }
    }
}

/// The refresh task.
struct Refresher {
    shared: Weak<Shared>,
    db: Db,
    settings: FeedSettings,
    inbox: Arc<Inbox>,
}

impl Refresher {
    fn publish(&self, snapshot: Snapshot) -> bool {
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        shared.snapshot.send_replace(Some(Arc::new(snapshot)));
        true
    }

    async fn run(self) {
        let mut backoff = Duration::from_secs(1);
        loop {
            // Changes noted from here on are applied after the build, by version.
            self.inbox.missed.store(false, Ordering::Release);
            let mut state = match FeedState::build(&self.db, &self.settings).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "building the FHIR feed failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    if self.shared.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
            };
            backoff = Duration::from_secs(1);
            let built = Instant::now();
            if !self.publish(state.snapshot(state.horizon)) {
                return;
            }
            loop {
                tokio::time::sleep(self.settings.refresh).await;
                if self.shared.strong_count() == 0 {
                    return;
                }
                let resync_due = self.settings.resync.is_some_and(|every| built.elapsed() >= every);
                if self.inbox.missed.load(Ordering::Acquire) || resync_due {
                    break;
                }
                let at = Utc::now();
                let changes = std::mem::take(&mut *self.inbox.changes.lock().unwrap_or_else(PoisonError::into_inner));
                let mut changed = state.apply(changes, at);
                match state.load_new(&self.db, at).await {
                    Ok(added) => changed |= added,
                    Err(e) => tracing::warn!(error = %e, "the FHIR feed could not look for new rows"),
                }
                changed |= state.drop_started(at);
                if changed {
                    let started = Instant::now();
                    state = state.render(&self.settings.map).await;
                    metrics::histogram!("fhir_feed_refresh_seconds").record(started.elapsed().as_secs_f64());
                    if !self.publish(state.snapshot(at)) {
                        return;
                    }
                }
            }
        }
    }
}

/// Every doctor's `scheduledThrough`.
async fn planned_through(db: &Db) -> Result<HashMap<i64, chrono::NaiveDate>, StoreError> {
    let ids = db::hours::doctors_with_patterns(db.conn()).await?;
    let mut planned = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(1000) {
        for (id, through) in db::hours::horizons_of(db.conn(), chunk).await? {
            if let Ok(day) = chrono::NaiveDate::parse_from_str(&through, "%Y-%m-%d") {
                planned.insert(id, day);
            }
        }
    }
    Ok(planned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn slot(id: i64, minute: i64, version: i64) -> FeedSlot {
        let start = Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap() + chrono::Duration::minutes(minute);
        FeedSlot {
            id,
            start_at: start,
            end_at: start + chrono::Duration::minutes(15),
            capacity: 1,
            booked: 0,
            version,
            closed: false,
        }
    }

    fn change(s: &FeedSlot, booked: i32, version: i64) -> SlotChange {
        SlotChange {
            slot_id: s.id,
            doctor_id: 7,
            start_at: s.start_at,
            capacity: s.capacity,
            booked_count: booked,
            version,
            closed: false,
        }
    }

    #[test]
    fn changes_apply_by_version_only() {
        let mut s = slot(1, 0, 3);
        assert!(!s.apply(&change(&s, 1, 3)), "the same version is old news");
        assert!(s.apply(&change(&s, 1, 4)));
        assert_eq!((s.booked, s.version), (1, 4));
        assert!(!s.apply(&change(&s, 0, 2)), "a late change is dropped");
        assert_eq!(s.booked, 1);
    }

    #[test]
    fn the_inbox_keeps_the_newest_change_per_slot_once_listening() {
        let inbox = Arc::new(Inbox::default());
        let observer = FeedObserver(Arc::clone(&inbox));
        let s = slot(1, 0, 0);
        observer.changed(&change(&s, 1, 1));
        assert!(inbox.changes.lock().unwrap().is_empty(), "nothing is kept before the first build");
        inbox.listening.store(true, Ordering::Release);
        observer.changed(&change(&s, 1, 2));
        observer.changed(&change(&s, 0, 1));
        assert_eq!(inbox.changes.lock().unwrap()[&1].version, 2);
        observer.may_have_missed_changes();
        assert!(inbox.missed.load(Ordering::Acquire));
    }

    #[test]
    fn rendered_files_round_trip_through_gzip() {
        let r = Rendered::json(&serde_json::json!({"a": 1}));
        assert_eq!(r.identity(), br#"{"a":1}"#);
        assert_eq!(r.raw_len, 7);
        assert_eq!(r.hash.len(), 24);
    }

    #[test]
    fn inserting_keeps_slots_by_start_and_the_newest_version() {
        let doctor =
            doctor::Model { id: 7, name: "Dr".into(), specialty: None, timezone: "UTC".into(), created_at: Utc::now() };
        let mut e = DoctorEntry::new(doctor, Utc::now());
        e.insert(slot(2, 15, 0));
        e.insert(slot(1, 0, 0));
        e.insert(slot(3, 30, 0));
        let mut newer = slot(2, 15, 5);
        newer.booked = 1;
        e.insert(newer);
        e.insert(slot(2, 15, 1));
        assert_eq!(e.slots.iter().map(|s| s.id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(e.slots[1].version, 5);
    }
}
