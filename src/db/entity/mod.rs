//! sea-orm entities: one per table, internal to the persistence layer. GraphQL output types
//! are separate (`crate::graphql::types`), so a new column never leaks into the API.

pub mod appointment;
pub mod appointment_slot;
pub mod doctor;
pub mod outbox;
pub mod patient_contact;
pub mod patient_message;
pub mod schedule_horizon;
pub mod time_off;
pub mod time_slot;
pub mod waitlist_entry;
pub mod webhook_attempt;
pub mod webhook_delivery;
pub mod webhook_endpoint;
pub mod working_hours;
