//! Rendered answers of slot reads, in process: the JSON text of an `availableSlots` or
//! `findSlots` answer, served again for the same request body without validating, executing
//! or serialising anything.
//!
//! A slot list of 40 slots is a few microseconds of data but about a hundred of GraphQL work
//! (validation, 120 field resolutions, serialisation), which made it the most expensive read
//! of an opening morning. This cache sits in front of all of that, and in front of the shared
//! slot-list rows (`guard::SlotCache`), which every instance shares. A search's page costs the
//! same GraphQL work on top of its statement; the same popular searches (a specialty from
//! today) come over and over.
//!
//! **When an answer stops being served.** Each answer depends on one or more doctors' slots;
//! the reads it is made of took a [`Stamp`] of each doctor's generation first (a search across
//! doctors, of its specialty's or everyone's) ([`crate::guard::Generations`], which hears of
//! every change as a `ChangeObserver`). An answer is served only while all its stamps are
//! current, and not stored when a change came while it was being made. So an answer is exact
//! while the change notices are, and its life (`ANSWER_CACHE_TTL_MS`, 30 s) only bounds what
//! nothing reports: a change written to the database by hand (a doctor's specialty changed in
//! SQL, say). It also ends when its earliest slot starts, and an answer made of rows from the
//! shared slot-list cache ends with those rows' TTL (`SLOT_CACHE_TTL_MS`): a commit's delete of
//! them in Redis can be lost. The booking decision never reads either.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use async_graphql::parser::types::{
    BaseType, ExecutableDocument, OperationDefinition, OperationType, Selection, SelectionSet, Type,
};
use axum::body::Bytes;

use crate::guard::{Generations, Stamp};

/// Total bytes of answers kept; past it, stale ones are swept and, if that is not enough,
/// arbitrary ones until a quarter is free (a flood of distinct requests costs memory up to
/// here, no more). An opening morning's 28,000 doctor-days of 40 slots take about 80 MB.
const MAX_BYTES: usize = 128 * 1024 * 1024;
/// Largest answer kept.
const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// The fields a kept answer may hold, by type: each is either a value of a row its answer
/// read under a stamp (a slot's own fields, a search page's), a value that never changes (a
/// doctor's own fields: doctors are created, never edited), or a read whose resolver notes a
/// stamp of its own (`availableSlots`, `findSlots`, `Doctor.slots`). A selection of anything
/// else (a doctor's `workingHours`, `timeOff` or `scheduledThrough`, which no stamp covers) is
/// answered afresh every time. `__typename` is allowed everywhere.
///
/// `every_field_of_a_kept_type_is_decided` fails when one of these types gains a field, so that
/// a new field is kept only once someone has said what it depends on.
const KEPT_FIELDS: [(&str, &[&str]); 6] = [
    ("Query", &["availableSlots", "findSlots"]),
    ("SlotSearchConnection", &["pageInfo", "edges", "nodes"]),
    ("SlotSearchEdge", &["node", "cursor"]),
    ("PageInfo", &["hasPreviousPage", "hasNextPage", "startCursor", "endCursor"]),
    ("Slot", &["id", "doctor", "startAt", "endAt", "capacity", "bookedCount", "available", "closed", "version"]),
    ("Doctor", &["id", "name", "specialty", "timezone", "slots"]),
];

/// Fragments followed at most this deep (validation refuses cycles, but this runs before it).
const MAX_DEPTH: usize = 32;

/// Whether the answer to `op` of `doc` may be kept: a query whose root fields are slot reads
/// (`availableSlots`, `findSlots`) or `__typename`, with no directives or fragments at the
/// root, and whose every nested selection is in [`KEPT_FIELDS`], through fragments.
pub fn made_of_slot_reads(doc: &ExecutableDocument, op: &OperationDefinition) -> bool {
    let roots = &op.selection_set.node.items;
    let slot_read = |name: &str| name != "__typename" && kept_field("Query", name);
    op.ty == OperationType::Query
        && op.directives.is_empty()
        && roots.iter().any(|s| matches!(&s.node, Selection::Field(f) if slot_read(&f.node.name.node)))
        && roots.iter().all(|s| match &s.node {
            Selection::Field(f) => f.node.directives.is_empty() && kept_field("Query", &f.node.name.node),
            Selection::FragmentSpread(_) | Selection::InlineFragment(_) => false,
        })
        && kept_selections(doc, "Query", &op.selection_set.node, 0)
}

/// Whether `field` of `ty` is in [`KEPT_FIELDS`] (or is `__typename`).
fn kept_field(ty: &str, field: &str) -> bool {
    field == "__typename" || KEPT_FIELDS.iter().any(|(t, fields)| *t == ty && fields.contains(&field))
}

/// Whether every field `set` (on an object of type `ty`) selects, at any depth, may be kept.
fn kept_selections(doc: &ExecutableDocument, ty: &str, set: &SelectionSet, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    set.items.iter().all(|selection| match &selection.node {
        Selection::Field(f) => {
            let name = f.node.name.node.as_str();
            if !kept_field(ty, name) {
                return false;
            }
            if f.node.selection_set.node.items.is_empty() {
                return true;
            }
            let Some(inner) = super::complete::field_type(ty, name).map(named_type) else {
                return false;
            };
            kept_selections(doc, inner, &f.node.selection_set.node, depth + 1)
        }
        Selection::InlineFragment(inline) => {
            let on = inline.node.type_condition.as_ref().map(|c| c.node.on.node.as_str());
            on.is_none_or(|on| on == ty) && kept_selections(doc, ty, &inline.node.selection_set.node, depth + 1)
        }
        Selection::FragmentSpread(spread) => doc.fragments.get(&spread.node.fragment_name.node).is_some_and(|f| {
            f.node.type_condition.node.on.node == ty && kept_selections(doc, ty, &f.node.selection_set.node, depth + 1)
        }),
    })
}

/// The object type a field's values are of, through lists and non-null.
fn named_type(ty: &Type) -> &str {
    match &ty.base {
        BaseType::Named(name) => name.as_str(),
        BaseType::List(inner) => named_type(inner),
    }
}

/// One kept answer.
struct Entry {
    body: Bytes,
    operation: String,
    stamps: Vec<Stamp>,
    /// The end of its life, whatever happens.
    until: Instant,
}

#[derive(Default)]
struct Inner {
    answers: HashMap<Bytes, Entry>,
    bytes: usize,
}

/// The kept answers of an instance.
pub(super) struct KeptAnswers {
    /// How long an answer lives at most; zero: off.
    ttl: Duration,
    generations: Arc<Generations>,
    inner: Mutex<Inner>,
}

impl KeptAnswers {
    /// Answers kept for `ttl` at most (zero: nothing is kept), current while `generations` say so.
    pub(super) fn new(ttl: Duration, generations: Arc<Generations>) -> Self {
        Self { ttl, generations, inner: Mutex::default() }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every operation leaves the map consistent; a panicking holder cannot break it.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn current(&self, entry: &Entry, now: Instant) -> bool {
        now < entry.until && self.generations.all_current(&entry.stamps, now)
    }

    /// The answer kept for this request body, with its operation name, if still current.
    pub(super) fn get(&self, request: &[u8]) -> Option<(Bytes, String)> {
        if self.ttl.is_zero() {
            return None;
        }
        let inner = self.lock();
        let entry = inner.answers.get(request)?;
        self.current(entry, Instant::now()).then(|| (entry.body.clone(), entry.operation.clone()))
    }

    /// Keeps `body` as the answer to `request`, made of the reads `stamps` were taken for; not
    /// kept when any of them changed meanwhile (the reads may predate the change).
    pub(super) fn put(&self, request: Bytes, stamps: Vec<Stamp>, body: Bytes, operation: &str) {
        if self.ttl.is_zero() || stamps.is_empty() || body.len() > MAX_ANSWER_BYTES {
            return;
        }
        let now = Instant::now();
        let until = stamps.iter().filter_map(Stamp::until).fold(now + self.ttl, Instant::min);
        let entry = Entry { body, operation: operation.to_owned(), stamps, until };
        if !self.current(&entry, now) {
            return;
        }
        let size = request.len() + entry.body.len();
        let mut inner = self.lock();
        if inner.bytes + size > MAX_BYTES {
            let Inner { answers, .. } = &mut *inner;
            answers.retain(|_, e| self.current(e, now));
            let mut bytes: usize = answers.iter().map(|(k, e)| k.len() + e.body.len()).sum();
            // The map's order is arbitrary: this drops a random sample, not the hottest answers.
            answers.retain(|k, e| {
                let keep = bytes + size <= MAX_BYTES / 4 * 3;
                if !keep {
                    bytes -= k.len() + e.body.len();
                }
                keep
            });
            inner.bytes = bytes;
        }
        inner.bytes += size;
        let key_len = request.len();
        if let Some(old) = inner.answers.insert(request, entry) {
            inner.bytes -= key_len + old.body.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use async_graphql::parser::parse_query;
    use chrono::Utc;

    use super::*;

    fn kept() -> (Arc<Generations>, KeptAnswers) {
        let generations = Arc::new(Generations::new());
        (Arc::clone(&generations), KeptAnswers::new(Duration::from_secs(60), generations))
    }

    fn put(kept: &KeptAnswers, request: &'static str, stamps: Vec<Stamp>) {
        kept.put(Bytes::from_static(request.as_bytes()), stamps, Bytes::from_static(b"{}"), "op");
    }

    #[test]
    fn an_answer_is_served_until_its_doctor_changes() {
        let (generations, kept) = kept();
        put(&kept, "q", vec![generations.stamp(7)]);
        assert_eq!(kept.get(b"q").map(|(b, op)| (b.len(), op)), Some((2, "op".to_owned())));
        assert!(kept.get(b"other").is_none());
        generations.changed(8);
        assert!(kept.get(b"q").is_some(), "another doctor's change keeps it");
        generations.changed(7);
        assert!(kept.get(b"q").is_none());
    }

    #[test]
    fn reads_made_before_a_change_are_not_kept() {
        let (generations, kept) = kept();
        let stamp = generations.stamp(7);
        generations.changed(7);
        put(&kept, "q", vec![stamp]);
        assert!(kept.get(b"q").is_none());
        put(&kept, "q", vec![]);
        assert!(kept.get(b"q").is_none(), "an answer with no stamp depends on unknown data");
    }

    #[test]
    fn answers_end_with_their_first_slot_the_ttl_or_a_resync() {
        let (generations, kept) = kept();
        let mut started = generations.stamp(7);
        started.expire_at(Utc::now());
        put(&kept, "started", vec![started]);
        assert!(kept.get(b"started").is_none());

        put(&kept, "q", vec![generations.stamp(7)]);
        generations.drop_all();
        assert!(kept.get(b"q").is_none());
        put(&kept, "q", vec![generations.stamp(7)]);
        assert!(kept.get(b"q").is_some());

        let off = KeptAnswers::new(Duration::ZERO, Arc::clone(&generations));
        put(&off, "q", vec![generations.stamp(7)]);
        assert!(off.get(b"q").is_none());
    }

    fn check(query: &str, name: Option<&str>) -> bool {
        parse_query(query).is_ok_and(|doc| {
            crate::graphql::chosen_operation(&doc, name).is_some_and(|op| made_of_slot_reads(&doc, op))
        })
    }

    #[test]
    fn only_slot_list_queries_qualify() {
        let list = "query L($d:ID!,$t:Date!){availableSlots(doctorId:$d,date:$t){id doctor{name slots(date:$t){id}}}}";
        assert!(check(list, None));
        assert!(check(list, Some("L")));
        assert!(!check(list, Some("M")));
        assert!(check("{a:availableSlots(doctorId:\"1\",date:\"2030-01-01\"){id} __typename}", None));
        assert!(!check("{__typename}", None));
        assert!(check(
            "{findSlots(input:{from:\"2030-01-01T00:00:00Z\",to:\"2030-01-02T00:00:00Z\"}){edges{cursor}}}",
            None
        ));
        assert!(!check("{availableSlots(doctorId:\"1\",date:\"2030-01-01\"){id} myAppointments{id}}", None));
        assert!(!check("{availableSlots(doctorId:\"1\",date:\"2030-01-01\") @include(if:true) {id}}", None));
        assert!(!check("{...F} fragment F on Query {availableSlots(doctorId:\"1\",date:\"2030-01-01\"){id}}", None));
        assert!(!check("mutation{availableSlots{id}}", None));
        assert!(!check("query A{availableSlots{id}} query B{availableSlots{id}}", None));
    }

    #[test]
    fn nested_selections_qualify_only_when_their_dependencies_are_known() {
        let find = |selection: &str| {
            format!("{{findSlots(input:{{from:\"2030-01-01T00:00:00Z\"}}){{pageInfo{{hasNextPage endCursor}} {selection}}}}}")
        };
        assert!(check(
            &find("nodes{id doctor{id name specialty timezone slots(date:\"2030-01-02\"){bookedCount}}}"),
            None
        ));
        assert!(!check(&find("edges{cursor node{...S}} nodes{... on Slot{id}}"), None), "S is not defined");
        assert!(check(&(find("edges{cursor node{...S}}") + " fragment S on Slot {id doctor{__typename}}"), None));
        assert!(check(&find("nodes{id @include(if:true) ... @skip(if:false) {version}}"), None));
        for unknown in ["workingHours{validFrom}", "timeOff{id}", "scheduledThrough"] {
            assert!(!check(&find(&format!("nodes{{doctor{{{unknown}}}}}")), None), "{unknown}");
            let list = format!("{{availableSlots(doctorId:\"1\",date:\"2030-01-01\"){{doctor{{{unknown}}}}}}}");
            assert!(!check(&list, None), "{unknown}");
        }
        assert!(!check(&(find("nodes{...D}") + " fragment D on Doctor {id}"), None), "a fragment on another type");
        assert!(!check(&(find("nodes{doctor{...D}}") + " fragment D on Doctor {workingHours{validFrom}}"), None));
        assert!(!check(&(find("nodes{...S}") + " fragment S on Slot {...S}"), None), "a cycle ends");
    }

    #[test]
    fn every_field_of_a_kept_type_is_decided() {
        // Fields of kept types that no stamp covers, left out of KEPT_FIELDS on purpose.
        let never: [(&str, &[&str]); 1] = [("Doctor", &["workingHours", "timeOff", "scheduledThrough"])];
        for (ty, kept) in KEPT_FIELDS {
            let left_out = never.iter().find(|(t, _)| *t == ty).map_or(&[][..], |(_, f)| f);
            // The root's other fields are simply not slot reads.
            let all = if ty == "Query" { Vec::new() } else { super::super::complete::fields_of(ty) };
            for field in all {
                assert!(
                    kept.contains(&field.as_str()) || left_out.contains(&field.as_str()),
                    "{ty}.{field}: say whether an answer holding it may be kept (KEPT_FIELDS)"
                );
            }
            for field in kept.iter().chain(left_out) {
                assert!(super::super::complete::field_type(ty, field).is_some(), "{ty}.{field} is not in the schema");
            }
        }
    }
}
