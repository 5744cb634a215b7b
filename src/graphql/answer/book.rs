//! `bookAppointment` answered without the executor, for the documents partners and widgets
//! send over and over.
//!
//! During the opening-morning burst nearly every request is the same booking mutation with new
//! variables, and async-graphql's request pipeline (validation walk, field resolution through
//! futures, the value tree) cost about a quarter of the server's CPU per rejected booking. A
//! document whose whole operation is one `bookAppointment` field, selecting only fields that
//! the booking's own outcome holds, is compiled once into a [`BookPlan`]; later requests of a
//! shape that passed the full validation call [`BookingService::book`] directly and build the
//! same answer the executor would, from the same scalar and enum conversions. Anything else
//! (fragments, directives, nested objects such as `appointment { slot }`, repeated response
//! keys, default values) is left to the executor, and `tests/api/direct.rs` checks that both
//! give the same answer, byte for byte.
//!
//! The input goes through the schema's own input type: [`BookPlan::bind`] reads the
//! `BookAppointmentInput` with its `InputType::parse` (its coercion and any validator it has)
//! and turns it into the service's request with the resolver's own conversion, so the direct
//! path cannot accept an input the executor would refuse, nor read one differently.

use async_graphql::{
    indexmap::IndexMap,
    parser::{
        types::{ExecutableDocument, Field, OperationType, Selection, SelectionSet},
        Positioned,
    },
    InputType, Name, PathSegment, Pos, Response, ScalarType, Value, Variables, ID,
};
use async_graphql_value::{ConstValue, Value as DocumentValue};

use crate::{
    auth::Principal,
    booking::{BookRequest, Booked, BookingService},
    db::entity::appointment,
    error::{Refusal, ServiceError},
    graphql::{
        error::to_graphql,
        types::{AppointmentStatus, BookAppointmentInput, CancelledBy, UserErrorCode},
    },
    model,
};

/// A `bookAppointment` operation compiled for the direct path.
#[derive(Debug)]
pub struct BookPlan {
    /// The field's response key (its alias, or `bookAppointment`).
    key: Name,
    /// Where the field is, for the locations of a top-level error.
    pos: Pos,
    /// Where `input.slotId` comes from.
    slot_id: Source,
    /// Where `input.idempotencyKey` comes from.
    idempotency_key: Source,
    /// Where `input.patientId` comes from ([`Source::Null`] when the document leaves it out,
    /// which the executor reads the same way).
    patient_id: Source,
    /// The payload's selection, in order.
    payload: Vec<(Name, PayloadField)>,
}

/// An input value: a variable's, or written in the document.
#[derive(Debug)]
enum Source {
    /// `$name`.
    Variable(Name),
    /// A string written in the document.
    Literal(String),
    /// `null` written in the document.
    Null,
}

/// A selected field of `BookAppointmentPayload`.
#[derive(Debug)]
enum PayloadField {
    Typename,
    Replayed,
    Appointment(Vec<(Name, AppointmentField)>),
    UserErrors(Vec<(Name, UserErrorField)>),
}

/// A selected field of `Appointment` (its scalars and enums only: `slot`, `slots` and the
/// reschedule links need loaders).
#[derive(Debug)]
enum AppointmentField {
    Typename,
    Id,
    PatientId,
    Status,
    StartAt,
    EndAt,
    ExpiresAt,
    CreatedAt,
    CancelledAt,
    CancelledBy,
}

/// A selected field of `UserError`.
#[derive(Debug)]
enum UserErrorField {
    Typename,
    Code,
    Message,
    Field,
}

impl BookPlan {
    /// The plan of `doc`, when it is one mutation made of one `bookAppointment` field the direct
    /// path can answer. The document must have passed validation (field names and argument
    /// types are trusted here).
    pub fn compile(doc: &ExecutableDocument) -> Option<Self> {
        let field = only_root_field(doc, OperationType::Mutation, "bookAppointment")?;
        let f = &field.node;
        if f.arguments.len() != 1 {
            return None;
        }
        let (arg_name, arg) = &f.arguments[0];
        let DocumentValue::Object(input) = &arg.node else {
            return None;
        };
        if arg_name.node != "input"
            || input.keys().any(|k| !["slotId", "idempotencyKey", "patientId"].contains(&k.as_str()))
        {
            return None;
        }
        let source = |name: &str| -> Option<Source> {
            match input.get(name)? {
                DocumentValue::Variable(v) => Some(Source::Variable(v.clone())),
                DocumentValue::String(s) => Some(Source::Literal(s.clone())),
                DocumentValue::Null => Some(Source::Null),
                _ => None,
            }
        };
        let patient_id = if input.contains_key("patientId") { source("patientId")? } else { Source::Null };
        let mut payload = Vec::new();
        for (key, field) in selected(&f.selection_set.node)? {
            let part = match field.name.node.as_str() {
                "__typename" => PayloadField::Typename,
                "replayed" => PayloadField::Replayed,
                "appointment" => PayloadField::Appointment(appointment_fields(&field.selection_set.node)?),
                "userErrors" => PayloadField::UserErrors(user_error_fields(&field.selection_set.node)?),
                _ => return None,
            };
            payload.push((key, part));
        }
        Some(Self {
            key: response_key(f),
            pos: field.pos,
            slot_id: source("slotId")?,
            idempotency_key: source("idempotencyKey")?,
            patient_id,
            payload,
        })
    }

    /// The request these variables make, read through `BookAppointmentInput` as the executor
    /// reads it; `None` sends the request to the executor, which refuses what it cannot read.
    pub fn bind(&self, variables: &Variables) -> Option<BookRequest> {
        let value = |source: &Source| -> ConstValue {
            match source {
                Source::Literal(s) => ConstValue::String(s.clone()),
                Source::Null => ConstValue::Null,
                Source::Variable(name) => variables.get(name).cloned().unwrap_or(ConstValue::Null),
            }
        };
        let mut input = IndexMap::with_capacity(3);
        input.insert(Name::new("slotId"), value(&self.slot_id));
        input.insert(Name::new("idempotencyKey"), value(&self.idempotency_key));
        input.insert(Name::new("patientId"), value(&self.patient_id));
        BookAppointmentInput::parse(Some(ConstValue::Object(input))).ok().map(BookRequest::from)
    }

    /// Books, and answers as the executor would.
    pub async fn run(&self, service: &BookingService, principal: &Principal, request: BookRequest) -> Response {
        let outcome = match principal.caller() {
            Some(caller) => service.book(caller, &request).await,
            None => Err(ServiceError::Unauthenticated),
        };
        match outcome {
            Ok(answer) => {
                crate::graphql::record_outcome(&answer);
                let mut data = IndexMap::with_capacity(1);
                data.insert(self.key.clone(), self.payload(&answer));
                Response::new(Value::Object(data))
            }
            Err(e) => Response::from_errors(vec![to_graphql(e)
                .into_server_error(self.pos)
                .with_path(vec![PathSegment::Field(self.key.to_string())])]),
        }
    }

    fn payload(&self, answer: &Result<Booked, Refusal>) -> Value {
        let mut out = IndexMap::with_capacity(self.payload.len());
        for (key, field) in &self.payload {
            let value = match (field, answer) {
                (PayloadField::Typename, _) => Value::String("BookAppointmentPayload".into()),
                (PayloadField::Replayed, Ok(b)) => Value::Boolean(b.replayed),
                (PayloadField::Replayed, Err(_)) => Value::Boolean(false),
                (PayloadField::Appointment(fields), Ok(b)) => appointment_value(fields, &b.appointment),
                (PayloadField::Appointment(_), Err(_)) => Value::Null,
                (PayloadField::UserErrors(_), Ok(_)) => Value::List(Vec::new()),
                (PayloadField::UserErrors(fields), Err(r)) => Value::List(vec![user_error_value(fields, r)]),
            };
            out.insert(key.clone(), value);
        }
        Value::Object(out)
    }
}

fn appointment_value(fields: &[(Name, AppointmentField)], a: &appointment::Model) -> Value {
    let mut out = IndexMap::with_capacity(fields.len());
    for (key, field) in fields {
        let value = match field {
            AppointmentField::Typename => Value::String("Appointment".into()),
            AppointmentField::Id => ScalarType::to_value(&ID(a.id.to_string())),
            AppointmentField::PatientId => ScalarType::to_value(&ID(a.patient_id.to_string())),
            AppointmentField::Status => AppointmentStatus::from(a.status()).to_value(),
            AppointmentField::StartAt => ScalarType::to_value(&a.start_at),
            AppointmentField::EndAt => ScalarType::to_value(&a.end_at),
            AppointmentField::ExpiresAt => a.expires_at.as_ref().map_or(Value::Null, ScalarType::to_value),
            AppointmentField::CreatedAt => ScalarType::to_value(&a.created_at),
            AppointmentField::CancelledAt => a.cancelled_at.as_ref().map_or(Value::Null, ScalarType::to_value),
            AppointmentField::CancelledBy => a
                .cancelled_by
                .as_deref()
                .and_then(model::CancelledBy::parse)
                .map_or(Value::Null, |c| CancelledBy::from(c).to_value()),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

fn user_error_value(fields: &[(Name, UserErrorField)], r: &Refusal) -> Value {
    let mut out = IndexMap::with_capacity(fields.len());
    for (key, field) in fields {
        let value = match field {
            UserErrorField::Typename => Value::String("UserError".into()),
            UserErrorField::Code => UserErrorCode::from(r.code).to_value(),
            UserErrorField::Message => Value::String(r.message.clone()),
            UserErrorField::Field => r.field.map_or(Value::Null, |f| {
                Value::List(crate::graphql::error::field_path(f).map(|p| Value::String(p.to_owned())).collect())
            }),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

fn appointment_fields(set: &SelectionSet) -> Option<Vec<(Name, AppointmentField)>> {
    leaves(set, |name| {
        Some(match name {
            "__typename" => AppointmentField::Typename,
            "id" => AppointmentField::Id,
            "patientId" => AppointmentField::PatientId,
            "status" => AppointmentField::Status,
            "startAt" => AppointmentField::StartAt,
            "endAt" => AppointmentField::EndAt,
            "expiresAt" => AppointmentField::ExpiresAt,
            "cancelledBy" => AppointmentField::CancelledBy,
            "createdAt" => AppointmentField::CreatedAt,
            "cancelledAt" => AppointmentField::CancelledAt,
            _ => return None,
        })
    })
}

fn user_error_fields(set: &SelectionSet) -> Option<Vec<(Name, UserErrorField)>> {
    leaves(set, |name| {
        Some(match name {
            "__typename" => UserErrorField::Typename,
            "code" => UserErrorField::Code,
            "message" => UserErrorField::Message,
            "field" => UserErrorField::Field,
            _ => return None,
        })
    })
}

/// The fields of a selection set of scalars, each known to `known`; `None` when one is not.
pub(super) fn leaves<T>(set: &SelectionSet, known: impl Fn(&str) -> Option<T>) -> Option<Vec<(Name, T)>> {
    selected(set)?.into_iter().map(|(key, f)| Some((key, known(f.name.node.as_str())?))).collect()
}

/// The plain fields of a selection set with their response keys: `None` when it holds a
/// fragment, a directive, an argument or a response key twice (the executor merges those).
fn selected(set: &SelectionSet) -> Option<Vec<(Name, &Field)>> {
    let mut out: Vec<(Name, &Field)> = Vec::with_capacity(set.items.len());
    for item in only_fields(set)? {
        let Selection::Field(field) = item else {
            return None;
        };
        let f = &field.node;
        let key = response_key(f);
        if !f.directives.is_empty() || !f.arguments.is_empty() || out.iter().any(|(k, _)| *k == key) {
            return None;
        }
        out.push((key, f));
    }
    Some(out)
}

/// The one field `name` of the document's one operation, of type `ty`, when nothing around it
/// needs the executor: no fragment, no directive, no variable with a default or a directive.
pub(super) fn only_root_field<'a>(
    doc: &'a ExecutableDocument,
    ty: OperationType,
    name: &str,
) -> Option<&'a Positioned<Field>> {
    if !doc.fragments.is_empty() {
        return None;
    }
    let mut operations = doc.operations.iter();
    let (_, op) = operations.next()?;
    if operations.next().is_some() {
        return None;
    }
    let op = &op.node;
    let plain_variables =
        op.variable_definitions.iter().all(|v| v.node.default_value.is_none() && v.node.directives.is_empty());
    if op.ty != ty || !op.directives.is_empty() || !plain_variables {
        return None;
    }
    let [Selection::Field(field)] = only_fields(&op.selection_set.node)?.as_slice() else {
        return None;
    };
    (field.node.name.node == name && field.node.directives.is_empty()).then_some(field)
}

/// The items of a selection set when all are fields.
pub(super) fn only_fields(set: &SelectionSet) -> Option<Vec<&Selection>> {
    set.items.iter().map(|i| matches!(i.node, Selection::Field(_)).then_some(&i.node)).collect()
}

pub(super) fn response_key(f: &Field) -> Name {
    f.alias.as_ref().map_or_else(|| f.name.node.clone(), |a| a.node.clone())
}
