//! `availableSlots` answered without the executor, for the slot-list documents widgets send
//! over and over; the list-side twin of [`super::book`].
//!
//! A kept answer (`super::kept`) serves most slot lists, but each doctor-day's
//! first read after a change (or after the answer's life) ran the whole executor: callgrind
//! counted about 300 k instructions for such a read against 26 k for a kept one, mostly
//! validation, field resolution through futures and the value tree's serialisation. A
//! document whose whole operation is one `availableSlots` field without `durationMinutes`,
//! selecting only the slot's own scalars, is compiled once into a [`ListPlan`]; later requests
//! of a shape that passed the full validation read the list through the same
//! [`BookingService::available_slots`] and build the same value the executor would, from the
//! same scalar conversions; a list the service refuses or fails to read gets the error the
//! executor would give, so a failing database is asked once, not again by the executor.
//! Anything else (fragments, directives, `doctor { … }`, repeated response keys, variables that
//! need coercion) is left to the executor, and `tests/api/direct.rs` checks that both give the
//! same answer, byte for byte.

use async_graphql::{
    indexmap::IndexMap,
    parser::types::{ExecutableDocument, OperationType},
    Name, PathSegment, Pos, Response, ScalarType, Value, Variables, ID,
};
use async_graphql_value::Value as DocumentValue;
use chrono::NaiveDate;

use super::book::{leaves, only_root_field, response_key};
use crate::{
    booking::BookingService,
    db::entity::time_slot,
    graphql::{context::AnswerStamps, error::to_graphql, scalars::Date},
};

/// An `availableSlots` operation compiled for the direct path.
#[derive(Debug)]
pub struct ListPlan {
    /// The field's response key (its alias, or `availableSlots`).
    key: Name,
    /// Where the field is in the document (an error's `locations`).
    pos: Pos,
    /// Where `doctorId` comes from.
    doctor_id: Source,
    /// Where `date` comes from.
    date: Source,
    /// The slot's selection, in order.
    fields: Vec<(Name, SlotField)>,
}

/// An argument: a variable's value, or a string written in the document.
#[derive(Debug)]
enum Source {
    Variable(Name),
    Literal(String),
}

/// A selected scalar of `Slot`.
#[derive(Debug)]
enum SlotField {
    Typename,
    Id,
    StartAt,
    EndAt,
    Capacity,
    BookedCount,
    Available,
    Closed,
    Version,
}

impl ListPlan {
    /// The plan of `doc`, when it is one query made of one `availableSlots` field the direct
    /// path can answer. The document must have passed validation (names and types are trusted).
    pub fn compile(doc: &ExecutableDocument) -> Option<Self> {
        let field = only_root_field(doc, OperationType::Query, "availableSlots")?;
        let f = &field.node;
        if f.arguments.len() != 2 {
            return None;
        }
        let source = |name: &str| -> Option<Source> {
            let (_, value) = f.arguments.iter().find(|(n, _)| n.node == name)?;
            match &value.node {
                DocumentValue::Variable(v) => Some(Source::Variable(v.clone())),
                DocumentValue::String(s) => Some(Source::Literal(s.clone())),
                _ => None,
            }
        };
        let fields = leaves(&f.selection_set.node, |name| {
            Some(match name {
                "__typename" => SlotField::Typename,
                "id" => SlotField::Id,
                "startAt" => SlotField::StartAt,
                "endAt" => SlotField::EndAt,
                "capacity" => SlotField::Capacity,
                "bookedCount" => SlotField::BookedCount,
                "available" => SlotField::Available,
                "closed" => SlotField::Closed,
                "version" => SlotField::Version,
                _ => return None,
            })
        })?;
        Some(Self {
            key: response_key(f),
            pos: field.pos,
            doctor_id: source("doctorId")?,
            date: source("date")?,
            fields,
        })
    }

    /// The doctor and day these variables ask for, when both are plain strings the scalars
    /// accept; `None` sends the request to the executor, which coerces or refuses.
    pub fn bind(&self, variables: &Variables) -> Option<(String, NaiveDate)> {
        let value = |source: &Source| -> Option<String> {
            match source {
                Source::Literal(s) => Some(s.clone()),
                Source::Variable(name) => match variables.get(name) {
                    Some(Value::String(s)) => Some(s.clone()),
                    _ => None,
                },
            }
        };
        Some((value(&self.doctor_id)?, Date::read(&value(&self.date)?)?.0))
    }

    /// Reads the list and answers as the executor would, noting its stamp in `stamps`. A
    /// refusal or a failed read is the executor's answer too: the field's error, and `data`
    /// null (the field is non-null).
    pub async fn run(
        &self,
        service: &BookingService,
        doctor_id: &str,
        date: NaiveDate,
        stamps: &AnswerStamps,
    ) -> Response {
        let list = match service.available_slots(doctor_id, date, None).await {
            Ok(list) => list,
            Err(e) => {
                let error =
                    to_graphql(e).into_server_error(self.pos).with_path(vec![PathSegment::Field(self.key.to_string())]);
                return Response::from_errors(vec![error]);
            }
        };
        if let Some(stamp) = list.stamp {
            stamps.record(stamp);
        }
        let slots = list.slots.iter().map(|s| self.slot_value(s)).collect();
        let mut data = IndexMap::with_capacity(1);
        data.insert(self.key.clone(), Value::List(slots));
        Response::new(Value::Object(data))
    }

    fn slot_value(&self, s: &time_slot::Model) -> Value {
        let mut out = IndexMap::with_capacity(self.fields.len());
        for (key, field) in &self.fields {
            let value = match field {
                SlotField::Typename => Value::String("Slot".into()),
                SlotField::Id => ScalarType::to_value(&ID(s.id.to_string())),
                SlotField::StartAt => ScalarType::to_value(&s.start_at),
                SlotField::EndAt => ScalarType::to_value(&s.end_at),
                SlotField::Capacity => ScalarType::to_value(&s.capacity),
                SlotField::BookedCount => ScalarType::to_value(&s.booked_count),
                SlotField::Available => ScalarType::to_value(&s.available()),
                SlotField::Closed => ScalarType::to_value(&s.closed_at.is_some()),
                SlotField::Version => ScalarType::to_value(&s.version),
            };
            out.insert(key.clone(), value);
        }
        Value::Object(out)
    }
}
