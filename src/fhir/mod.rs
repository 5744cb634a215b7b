//! FHIR R4 (4.0.1) beside GraphQL, on the same data: reads of doctors, schedules, slots and
//! appointments, the slot search, `$hold`/`$book` for partners, and the SMART Scheduling Links
//! feed (`$bulk-publish`) for aggregators.
//!
//! Thin, like the GraphQL resolvers: every booking operation is a call of the
//! [`BookingService`] with the same caller and request a GraphQL mutation would pass, so the
//! transaction, the refusals (in the same order) and the idempotency key space are GraphQL's.
//! Reads of relations (an appointment's slots, a slot's doctor) go to [`crate::db`] directly,
//! as GraphQL's loaders do. Errors are `OperationOutcome`s ([`outcome`]).
//!
//! Ids are the GraphQL ids: `Slot/12` is `slot(id: "12")`; a doctor is `Practitioner/{id}`,
//! `PractitionerRole/{id}` and `Schedule/{id}`; a patient `Patient/{patientId}`; the clinic
//! is `Location/clinic`.

pub mod capability;
pub mod feed;
pub mod find;
pub mod map;
pub mod outcome;
pub mod params;
pub mod resources;
pub mod search;
pub mod settings;

#[cfg(test)]
mod golden;

use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

use axum::{
    body::{to_bytes, Body},
    extract::{Path, Query, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use chrono::{DateTime, Utc};
use serde::Serialize;

pub use self::settings::Settings;
use self::{
    feed::{Feed, FeedFile, Rendered, Snapshot},
    outcome::{FhirError, FHIR_JSON},
    params::SeatTarget,
    resources::{Bundle, BundleEntry, BundleEntrySearch, BundleLink, Resource},
    search::narrow,
};
use crate::{
    auth::{Authenticator, Caller, Principal},
    booking::{input::parse_id, BookRequest, Booked, BookingService},
    db::{self, entity::appointment, fhir::SlotSearch},
    error::Outcome,
};

/// The media type of the feed's files.
pub const FHIR_NDJSON: &str = "application/fhir+ndjson";
/// How far before `_since` a file's change still lists it (clocks of instances differ a little).
const SINCE_MARGIN: chrono::TimeDelta = chrono::TimeDelta::seconds(5);

/// What the FHIR handlers share.
pub struct FhirState {
    /// The booking service.
    pub service: BookingService,
    /// Verifies bearer tokens.
    pub tokens: Arc<Authenticator>,
    /// The SMART Scheduling Links feed.
    pub feed: Feed,
    /// The surface's settings (`PUBLIC_BASE_URL`, the feed's `max-age`, …).
    pub settings: Settings,
    /// The origin when neither `PUBLIC_BASE_URL` nor a usable `Host` header says one
    /// (`http://BIND_ADDR`).
    pub fallback_origin: String,
    /// Largest request body.
    pub max_body_bytes: usize,
}

type Shared = State<Arc<FhirState>>;

/// The routes under `/fhir`, with their state, ready to be nested.
pub fn router<S: Clone + Send + Sync + 'static>(state: FhirState) -> Router<S> {
    let state = Arc::new(state);
    Router::new()
        .route("/metadata", get(metadata))
        .route("/.well-known/smart-configuration", get(smart_configuration))
        .route("/$bulk-publish", get(manifest))
        .route("/$bulk-publish/{file}", get(feed_file))
        .route("/Practitioner/{id}", get(read_practitioner))
        .route("/PractitionerRole/{id}", get(read_practitioner_role))
        .route("/Schedule/{id}", get(read_schedule))
        .route("/Location/{id}", get(read_location))
        .route("/OperationDefinition/{id}", get(read_operation_definition))
        .route("/Slot", get(search_slots))
        .route("/Slot/{id}", get(read_slot))
        .route("/Appointment/{id}", get(read_appointment))
        .route("/Appointment/$find", get(find_get).post(find_post))
        .route("/Appointment/$book", post(book))
        .route("/Appointment/$hold", post(hold))
        .fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), refuse_invalid_tokens))
        .with_state(state)
}

/// A token that is presented but invalid is refused on every request, public ones included,
/// as the contract says for GraphQL; no token at all is anonymous.
async fn refuse_invalid_tokens(
    State(state): Shared,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if req.headers().contains_key(header::AUTHORIZATION) {
        if let Err(e) = state.principal(req.headers()).await {
            return e.into_response();
        }
    }
    next.run(req).await
}

async fn unknown_route() -> FhirError {
    FhirError::new("NOT_FOUND", "no such FHIR endpoint (see /fhir/metadata)")
}

async fn method_not_allowed() -> FhirError {
    FhirError::new("METHOD_NOT_ALLOWED", "this method is not allowed here (see the Allow header)")
}

impl FhirState {
    /// The absolute URL of `/fhir` for this request: `PUBLIC_BASE_URL`, else the `Host` header
    /// (when it is a plain host and port), else `http://BIND_ADDR`.
    fn base(&self, headers: &HeaderMap) -> String {
        if let Some(base) = &self.settings.public_base_url {
            return format!("{base}/fhir");
        }
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).filter(|h| {
            !h.is_empty() && h.len() <= 255 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
        });
        match host {
            Some(h) => format!("http://{h}/fhir"),
            None => format!("{}/fhir", self.fallback_origin),
        }
    }

    /// Who is calling: anonymous, a caller, or `401` for a token that is presented but invalid.
    async fn principal(&self, headers: &HeaderMap) -> Result<Principal, FhirError> {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Ok(Principal::Anonymous);
        };
        let value =
            value.to_str().map_err(|_| FhirError::new("UNAUTHENTICATED", "the Authorization header is not text"))?;
        crate::auth::principal_from_header(&self.tokens, value).await.map_err(|m| FhirError::new("UNAUTHENTICATED", m))
    }

    /// The caller, or `401` when there is none.
    async fn caller(&self, headers: &HeaderMap) -> Result<Caller, FhirError> {
        match self.principal(headers).await? {
            Principal::Caller(c) => Ok(c),
            Principal::Anonymous => Err(FhirError::new("UNAUTHENTICATED", "send Authorization: Bearer <token>")),
        }
    }
}

/// A resource as the answer, `application/fhir+json`.
fn resource_response(status: StatusCode, resource: &Resource) -> Response {
    match serde_json::to_vec(resource) {
        Ok(body) => (status, [(header::CONTENT_TYPE, FHIR_JSON)], body).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot serialize a FHIR resource");
            FhirError::new("INTERNAL", "internal error").into_response()
        }
    }
}

/// `GET /fhir/metadata`.
async fn metadata(State(state): Shared, headers: HeaderMap) -> Response {
    let base = state.base(&headers);
    let uris =
        state.tokens.smart_provider().and_then(|p| p.discovery).and_then(|d| {
            Some(capability::OauthUris { authorize: d.authorization_endpoint?, token: d.token_endpoint? })
        });
    resource_response(StatusCode::OK, &Resource::CapabilityStatement(capability::statement_with(&base, uris.as_ref())))
}

/// `GET /fhir/.well-known/smart-configuration`: the SMART App Launch discovery document of the
/// first trusted provider; `404` when none is, `503` until its discovery document was read.
async fn smart_configuration(State(state): Shared) -> Response {
    let Some(provider) = state.tokens.smart_provider() else {
        return FhirError::new("NOT_FOUND", "no identity provider is configured (AUTH_ISSUERS)").into_response();
    };
    let Some(discovery) = provider.discovery else {
        let unreachable = FhirError::new("UNAVAILABLE", "the identity provider has not been reached yet");
        return FhirError { retry_after: Some(5), ..unreachable }.into_response();
    };
    let doc = serde_json::json!({
        "issuer": provider.issuer,
        "jwks_uri": provider.jwks_uri,
        "authorization_endpoint": discovery.authorization_endpoint,
        "token_endpoint": discovery.token_endpoint,
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "private_key_jwt"],
        "grant_types_supported": ["authorization_code", "client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": ["openid", "fhirUser", "launch/patient", "patient/*.rs", "system/*.rs"],
        "response_types_supported": ["code"],
        "capabilities": [
            "launch-standalone",
            "client-public",
            "client-confidential-symmetric",
            "client-confidential-asymmetric",
            "context-standalone-patient",
            "sso-openid-connect",
            "permission-v2"
        ]
    });
    (StatusCode::OK, axum::Json(doc)).into_response()
}

/// `GET /fhir/OperationDefinition/{id}`.
async fn read_operation_definition(State(state): Shared, headers: HeaderMap, Path(id): Path<String>) -> Response {
    match capability::operation_definition(&state.base(&headers), &id) {
        Some(def) => resource_response(StatusCode::OK, &Resource::OperationDefinition(def)),
        None => FhirError::not_found("OperationDefinition", &id).into_response(),
    }
}

/// A row id from a path, or `404` (a FHIR id that is not one of our numbers names nothing).
fn row_id(kind: &str, raw: &str) -> Result<i64, FhirError> {
    parse_id("id", raw).map_err(|_| FhirError::not_found(kind, raw))
}

/// The doctor behind `Practitioner`, `PractitionerRole` and `Schedule` `{id}`.
async fn doctor(state: &FhirState, kind: &str, raw: &str) -> Result<db::entity::doctor::Model, FhirError> {
    let id = row_id(kind, raw)?;
    db::doctors::find(state.service.db().conn(), id)
        .await
        .map_err(|e| FhirError::from(crate::error::ServiceError::from(e)))?
        .ok_or_else(|| FhirError::not_found(kind, raw))
}

async fn read_practitioner(State(state): Shared, Path(id): Path<String>) -> Result<Response, FhirError> {
    let d = doctor(&state, "Practitioner", &id).await?;
    Ok(resource_response(StatusCode::OK, &Resource::Practitioner(map::practitioner(&d))))
}

async fn read_practitioner_role(State(state): Shared, Path(id): Path<String>) -> Result<Response, FhirError> {
    let d = doctor(&state, "PractitionerRole", &id).await?;
    let role = map::practitioner_role(&d, state.feed.map_settings());
    Ok(resource_response(StatusCode::OK, &Resource::PractitionerRole(role)))
}

async fn read_schedule(State(state): Shared, Path(id): Path<String>) -> Result<Response, FhirError> {
    let d = doctor(&state, "Schedule", &id).await?;
    let through = state.service.scheduled_through(d.id).await?;
    Ok(resource_response(StatusCode::OK, &Resource::Schedule(map::schedule(&d, through))))
}

async fn read_location(State(state): Shared, Path(id): Path<String>) -> Result<Response, FhirError> {
    if id != map::LOCATION_ID {
        return Err(FhirError::not_found("Location", &id));
    }
    Ok(resource_response(StatusCode::OK, &Resource::Location(map::location(state.feed.map_settings()))))
}

/// `GET /fhir/Slot/{id}`.
async fn read_slot(State(state): Shared, Path(id): Path<String>) -> Result<Response, FhirError> {
    row_id("Slot", &id)?;
    let slot = state.service.slot(&id).await?.ok_or_else(|| FhirError::not_found("Slot", &id))?;
    let d = doctor(&state, "Schedule", &slot.doctor_id.to_string()).await?;
    let resource = map::slot(&map::SlotFacts::from(&slot), map::zone(&d), state.feed.map_settings());
    Ok(resource_response(StatusCode::OK, &Resource::Slot(resource)))
}

/// `GET /fhir/Slot?schedule=…&start=…&status=…&_count=…` (see [`search`]).
async fn search_slots(
    State(state): Shared,
    headers: HeaderMap,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, FhirError> {
    let strict = headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(';').any(|p| p.trim().eq_ignore_ascii_case("handling=strict")));
    let q = search::parse_slot_query(&params, strict)?;
    let base = state.base(&headers);
    let self_url =
        format!("{base}/Slot?{}", q.query_string(params.iter().find(|(k, _)| k == "_cursor").map(|(_, v)| v.as_str())));
    // An unknown or malformed schedule id names no schedule: an empty result, as FHIR searches say.
    let doctor = match parse_id("schedule", &q.schedule) {
        Ok(id) => db::doctors::find(state.service.db().conn(), id)
            .await
            .map_err(|e| FhirError::from(crate::error::ServiceError::from(e)))?,
        Err(_) => None,
    };
    let Some(doctor) = doctor else {
        return Ok(bundle_response(0, Vec::new(), self_url, None));
    };
    let tz = map::zone(&doctor);
    let mut search =
        SlotSearch { doctor_id: doctor.id, from: None, to: None, statuses: q.status.as_ref().map(|s| s.1) };
    for (raw, prefix, value) in &q.start {
        let interval = value
            .interval(tz)
            .ok_or_else(|| FhirError::bad_request(format!("start {raw:?} is out of range")).at("start"))?;
        narrow(&mut search.from, &mut search.to, *prefix, interval);
    }
    let conn = state.service.db().conn();
    let to_fhir = |e: db::StoreError| FhirError::from(crate::error::ServiceError::from(e));
    let total = db::fhir::count_slots(conn, &search).await.map_err(to_fhir)?;
    if q.count == 0 {
        return Ok(bundle_response(total, Vec::new(), self_url, None));
    }
    let mut rows = db::fhir::search_slots(conn, &search, q.cursor, q.count + 1).await.map_err(to_fhir)?;
    let more = rows.len() as u64 > q.count;
    rows.truncate(usize::try_from(q.count).unwrap_or(usize::MAX));
    let next = match (more, rows.last()) {
        (true, Some(last)) => {
            Some(format!("{base}/Slot?{}", q.query_string(Some(&search::encode_cursor(last.start_at, last.id)))))
        }
        _ => None,
    };
    let settings = state.feed.map_settings();
    let entries = rows
        .iter()
        .map(|s| BundleEntry {
            full_url: format!("{base}/Slot/{}", s.id),
            resource: Box::new(Resource::Slot(map::slot(&map::SlotFacts::from(s), tz, settings))),
            search: Some(BundleEntrySearch { mode: Some("match".into()) }),
        })
        .collect();
    Ok(bundle_response(total, entries, self_url, next))
}

fn bundle_response(total: u64, entry: Vec<BundleEntry>, self_url: String, next: Option<String>) -> Response {
    let mut link = vec![BundleLink { relation: "self".into(), url: self_url }];
    if let Some(url) = next {
        link.push(BundleLink { relation: "next".into(), url });
    }
    let bundle = Bundle { type_: "searchset".into(), total: Some(total), link, entry };
    resource_response(StatusCode::OK, &Resource::Bundle(bundle))
}

/// `GET /fhir/Appointment/$find?start=…&end=…` (see [`find`]).
async fn find_get(
    State(state): Shared,
    headers: HeaderMap,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, FhirError> {
    find_slots(&state, &headers, &params).await
}

/// `POST /fhir/Appointment/$find` with a `Parameters` body.
async fn find_post(State(state): Shared, headers: HeaderMap, body: Body) -> Result<Response, FhirError> {
    let bytes = to_bytes(body, state.max_body_bytes).await.map_err(|_| {
        FhirError::new("PAYLOAD_TOO_LARGE", format!("the request body is larger than {} bytes", state.max_body_bytes))
    })?;
    find_slots(&state, &headers, &find::body_pairs(&bytes)?).await
}

/// The page of `findSlots` that `params` ask for, as a searchset of proposed appointments.
async fn find_slots(
    state: &FhirState,
    headers: &HeaderMap,
    params: &[(String, String)],
) -> Result<Response, FhirError> {
    let q = find::parse(params)?;
    let page = state.service.find_slots(&q.request, Some(q.count), q.cursor).await?;
    let base = state.base(headers);
    let self_url = format!("{base}/Appointment/$find?{}", q.query_string(q.cursor));
    let next = match (page.has_next, page.slots.last()) {
        (true, Some(last)) => {
            Some(format!("{base}/Appointment/$find?{}", q.query_string(Some(crate::booking::SlotPosition::of(last)))))
        }
        _ => None,
    };
    let mut ids: Vec<i64> = page.slots.iter().map(|s| s.doctor_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let zones: std::collections::HashMap<i64, chrono_tz::Tz> = db::doctors::find_many(state.service.db().conn(), &ids)
        .await
        .map_err(|e| FhirError::from(crate::error::ServiceError::from(e)))?
        .iter()
        .map(|d| (d.id, map::zone(d)))
        .collect();
    let entries = page
        .slots
        .iter()
        .map(|s| {
            let tz = zones.get(&s.doctor_id).copied().unwrap_or(chrono_tz::UTC);
            find::entry(Resource::Appointment(map::proposed_appointment(s, tz)))
        })
        .collect();
    Ok(resource_response(StatusCode::OK, &find::bundle(entries, self_url, next)))
}

/// An appointment as an `Appointment` (its slots and doctor read like GraphQL's loaders do).
async fn appointment_resource(state: &FhirState, a: &appointment::Model) -> Result<Resource, FhirError> {
    let conn = state.service.db().conn();
    let to_fhir = |e: db::StoreError| FhirError::from(crate::error::ServiceError::from(e));
    let (doctor_id, slots) = db::fhir::appointment_slots(conn, a).await.map_err(to_fhir)?;
    let doctor_id =
        doctor_id.ok_or_else(|| to_fhir(db::StoreError::Inconsistent(format!("appointment {} has no slot", a.id))))?;
    let tz = match db::doctors::find(conn, doctor_id).await.map_err(to_fhir)? {
        Some(d) => map::zone(&d),
        None => chrono_tz::UTC,
    };
    Ok(Resource::Appointment(map::appointment(a, doctor_id, tz, &slots)))
}

/// `GET /fhir/Appointment/{id}`: a token is required; visible as GraphQL's `appointment(id)`
/// (otherwise `404`, never telling whether it exists).
async fn read_appointment(
    State(state): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, FhirError> {
    let principal = match state.principal(&headers).await? {
        Principal::Anonymous => return Err(FhirError::new("UNAUTHENTICATED", "send Authorization: Bearer <token>")),
        p => p,
    };
    row_id("Appointment", &id)?;
    let record =
        state.service.appointment(&principal, &id).await?.ok_or_else(|| FhirError::not_found("Appointment", &id))?;
    let resource = appointment_resource(&state, &record.appointment).await?;
    Ok(resource_response(StatusCode::OK, &resource))
}

/// The future of a service call that takes a seat.
pub type SeatFuture<'a, T> = Pin<Box<dyn Future<Output = Outcome<T>> + Send + 'a>>;
/// A service call that takes a seat: `BookingService::book` or `BookingService::hold`.
pub type SeatCall = for<'a> fn(&'a BookingService, &'a Caller, &'a BookRequest) -> SeatFuture<'a, Booked>;
fn book_call<'a>(service: &'a BookingService, caller: &'a Caller, req: &'a BookRequest) -> SeatFuture<'a, Booked> {
    Box::pin(service.book(caller, req))
}

fn hold_call<'a>(service: &'a BookingService, caller: &'a Caller, req: &'a BookRequest) -> SeatFuture<'a, Booked> {
    Box::pin(service.hold(caller, req))
}

/// The request the service gets, as GraphQL builds it (FHIR holds and books one slot's length).
fn book_request(slot_id: String, idempotency_key: String, patient_id: Option<String>) -> BookRequest {
    BookRequest { slot_id, idempotency_key, patient_id, duration_minutes: None }
}

/// `POST /fhir/Appointment/$book`.
async fn book(State(state): Shared, headers: HeaderMap, body: Body) -> Result<Response, FhirError> {
    let (caller, target) = seat_request(&state, &headers, body, true).await?;
    match target {
        SeatTarget::Slot { slot_id, patient_id } => {
            take_seat(&state, &headers, &caller, slot_id, patient_id, book_call).await
        }
        SeatTarget::Appointment { appointment_id } => {
            let confirmed =
                state.service.confirm(&caller, &appointment_id).await?.map_err(|r| refusal(r, Some("appointment")))?;
            answer_appointment(&state, &headers, &confirmed.appointment, StatusCode::OK).await
        }
    }
}

/// `POST /fhir/Appointment/$hold`.
async fn hold(State(state): Shared, headers: HeaderMap, body: Body) -> Result<Response, FhirError> {
    let (caller, target) = seat_request(&state, &headers, body, false).await?;
    let SeatTarget::Slot { slot_id, patient_id } = target else {
        return Err(FhirError::invalid("$hold takes a slot").at("slot"));
    };
    take_seat(&state, &headers, &caller, slot_id, patient_id, hold_call).await
}

/// The caller and the body of `$hold`/`$book`: `401` without a valid token, `415` for a body
/// that is not FHIR JSON, `413` for one over `MAX_BODY_BYTES`, `400`/`422` for one we cannot
/// use ([`params`]).
async fn seat_request(
    state: &FhirState,
    headers: &HeaderMap,
    body: Body,
    confirm_allowed: bool,
) -> Result<(Caller, SeatTarget), FhirError> {
    let caller = state.caller(headers).await?;
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let media = ct.to_str().unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if media != FHIR_JSON && media != "application/json" {
            return Err(FhirError::new(
                "UNSUPPORTED_MEDIA_TYPE",
                "send the body as Content-Type: application/fhir+json",
            ));
        }
    }
    let bytes = to_bytes(body, state.max_body_bytes).await.map_err(|_| {
        FhirError::new("PAYLOAD_TOO_LARGE", format!("the request body is larger than {} bytes", state.max_body_bytes))
    })?;
    Ok((caller, params::parse_seat_request(&bytes, confirm_allowed)?))
}

/// Takes a seat through `call` with the `Idempotency-Key` header: `201` and the appointment
/// (`200` for a replay), or the refusal.
async fn take_seat(
    state: &FhirState,
    headers: &HeaderMap,
    caller: &Caller,
    slot_id: String,
    patient_id: Option<String>,
    call: SeatCall,
) -> Result<Response, FhirError> {
    let key = headers.get("idempotency-key").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let missing_key = key.is_none();
    let req = book_request(slot_id, key.unwrap_or_default(), patient_id);
    let booked = call(&state.service, caller, &req).await?.map_err(|r| {
        let e = refusal(r, None);
        if missing_key && e.expression.as_deref() == Some("Idempotency-Key") {
            FhirError::invalid("the Idempotency-Key header is required (1 to 64 printable ASCII characters)")
                .at("Idempotency-Key")
        } else {
            e
        }
    })?;
    let status = if booked.replayed { StatusCode::OK } else { StatusCode::CREATED };
    answer_appointment(state, headers, &booked.appointment, status).await
}

/// A refusal as an `OperationOutcome`, the value at fault named as the FHIR request names it
/// (`subject`: what the operation's own id stands for, see [`outcome::expression`]).
fn refusal(r: crate::error::Refusal, subject: Option<&'static str>) -> FhirError {
    let field = r.field;
    let e = FhirError::from(r);
    match field {
        Some(f) => e.at(outcome::expression(f.field, subject)),
        None => e,
    }
}

/// The appointment as the answer of an operation, with `Location` naming it.
async fn answer_appointment(
    state: &FhirState,
    headers: &HeaderMap,
    a: &appointment::Model,
    status: StatusCode,
) -> Result<Response, FhirError> {
    let resource = appointment_resource(state, a).await?;
    let mut resp = resource_response(status, &resource);
    let location = format!("{}/Appointment/{}", state.base(headers), a.id);
    if let Ok(v) = HeaderValue::from_str(&location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(resp)
}

/// The SMART Scheduling Links manifest (not a FHIR resource).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    transaction_time: String,
    request: String,
    output: Vec<ManifestOutput>,
    error: Vec<ManifestOutput>,
}

#[derive(Serialize)]
struct ManifestOutput {
    #[serde(rename = "type")]
    type_: &'static str,
    url: String,
    /// The states the file's data is about (SMART's hint for regional clients).
    #[serde(skip_serializing_if = "Option::is_none")]
    extension: Option<ManifestExtension>,
}

#[derive(Serialize)]
struct ManifestExtension {
    state: Vec<String>,
}

fn render_manifest<'a>(
    state: &FhirState,
    snapshot: &Snapshot,
    base: &str,
    request: String,
    files: impl Iterator<Item = &'a FeedFile>,
) -> Rendered {
    // Every file is about the one clinic: its state, when its address is configured.
    let region = state.feed.map_settings().location.address.as_ref().map(|a| a.state.clone());
    let manifest = Manifest {
        transaction_time: map::instant(snapshot.transaction_time, chrono_tz::UTC),
        request,
        output: files
            .map(|f| ManifestOutput {
                type_: f.kind.as_str(),
                url: format!("{base}/$bulk-publish/{}", f.name),
                extension: region.clone().map(|s| ManifestExtension { state: vec![s] }),
            })
            .collect(),
        error: Vec::new(),
    };
    Rendered::json(&manifest)
}

async fn snapshot(state: &FhirState) -> Result<Arc<Snapshot>, FhirError> {
    state
        .feed
        .snapshot()
        .await
        .map_err(|e| FhirError { retry_after: Some(5), ..FhirError::new("UNAVAILABLE", e.to_string()) })
}

/// `GET /fhir/$bulk-publish[?_since=…]`: public; `_since` lists only the files with changes
/// since that instant (all of them when it is before what the feed knows, see [`feed`]).
async fn manifest(
    State(state): Shared,
    headers: HeaderMap,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, FhirError> {
    let mut since = None;
    for (name, value) in &params {
        match name.as_str() {
            "_since" => since = Some(parse_since(value)?),
            "_format" | "_outputFormat" => {}
            _ => {}
        }
    }
    let snapshot = snapshot(&state).await?;
    let base = state.base(&headers);
    let rendered = match since {
        None => snapshot.manifest(&base, || {
            render_manifest(&state, &snapshot, &base, format!("{base}/$bulk-publish"), snapshot.files.iter())
        }),
        Some((raw, since)) => {
            let request = format!("{base}/$bulk-publish?_since={}", raw.replace('+', "%2B"));
            let all = since < snapshot.horizon;
            let files = snapshot.files.iter().filter(|f| all || f.changed_at >= since - SINCE_MARGIN);
            Arc::new(render_manifest(&state, &snapshot, &base, request, files))
        }
    };
    Ok(serve_rendered(&headers, &rendered, FHIR_JSON, state.settings.feed_max_age))
}

fn parse_since(raw: &str) -> Result<(String, DateTime<Utc>), FhirError> {
    let bad = || FhirError::bad_request("_since must be an instant such as 2026-12-01T09:00:00Z").at("_since");
    match search::parse_date(raw) {
        Ok(search::DateValue::Instant(t, _)) => Ok((raw.to_owned(), t.with_timezone(&Utc))),
        _ => Err(bad()),
    }
}

/// `GET /fhir/$bulk-publish/{file}`.
async fn feed_file(State(state): Shared, headers: HeaderMap, Path(name): Path<String>) -> Result<Response, FhirError> {
    let snapshot = snapshot(&state).await?;
    let file = snapshot.file(&name).ok_or_else(|| {
        FhirError::new("NOT_FOUND", "no such feed file (it may have been dropped; read the manifest again)")
    })?;
    Ok(serve_rendered(&headers, &file.rendered, FHIR_NDJSON, state.settings.feed_max_age))
}

/// Serves a kept file: gzip as kept when the client takes it, `304` when its `If-None-Match`
/// names the content, and a strong `ETag` per encoding.
fn serve_rendered(headers: &HeaderMap, r: &Rendered, content_type: &'static str, max_age: Duration) -> Response {
    let gzip = accepts_gzip(headers);
    let etag = if gzip { format!("\"{}.gz\"", r.hash) } else { format!("\"{}\"", r.hash) };
    let cache = format!("public, max-age={}", max_age.as_secs());
    let not_modified = none_match(headers, &r.hash);
    let mut resp = if not_modified {
        StatusCode::NOT_MODIFIED.into_response()
    } else if gzip {
        let mut resp = (StatusCode::OK, r.gz.clone()).into_response();
        resp.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        resp
    } else {
        (StatusCode::OK, r.identity()).into_response()
    };
    let h = resp.headers_mut();
    if !not_modified {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(&cache) {
        h.insert(header::CACHE_CONTROL, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    resp
}

/// Whether `Accept-Encoding` takes gzip (`gzip`, `x-gzip` or `*`, with a non-zero `q`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(
        |item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q_zero = parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=").is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
            });
            matches!(coding.as_str(), "gzip" | "x-gzip" | "*") && !q_zero
        },
    )
}

/// Whether `If-None-Match` names this content (in either encoding, weak or strong: the
/// comparison for `If-None-Match` is the weak one).
fn none_match(headers: &HeaderMap, hash: &str) -> bool {
    headers.get_all(header::IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(
        |tag| {
            let tag = tag.trim();
            if tag == "*" {
                return true;
            }
            let tag = tag.strip_prefix("W/").unwrap_or(tag).trim_matches('"');
            tag.strip_suffix(".gz").unwrap_or(tag) == hash
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn gzip_is_sent_when_asked() {
        assert!(accepts_gzip(&headers(&[("accept-encoding", "gzip, deflate, br")])));
        assert!(accepts_gzip(&headers(&[("accept-encoding", "br;q=1.0, gzip;q=0.5")])));
        assert!(!accepts_gzip(&headers(&[("accept-encoding", "gzip;q=0")])));
        assert!(!accepts_gzip(&headers(&[("accept-encoding", "identity")])));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn if_none_match_names_the_content_in_any_encoding() {
        assert!(none_match(&headers(&[("if-none-match", "\"abc\"")]), "abc"));
        assert!(none_match(&headers(&[("if-none-match", "W/\"abc.gz\"")]), "abc"));
        assert!(none_match(&headers(&[("if-none-match", "\"x\", \"abc\"")]), "abc"));
        assert!(none_match(&headers(&[("if-none-match", "*")]), "abc"));
        assert!(!none_match(&headers(&[("if-none-match", "\"abd\"")]), "abc"));
    }

    #[test]
    fn refusals_name_the_fhir_parameter() {
        use crate::error::{Field, Refusal, RefusalCode};
        let r = Refusal::invalid(Field::SlotId.in_request(), "bad");
        assert_eq!(refusal(r, None).expression.as_deref(), Some("slot"));
        let r = Refusal::invalid(Field::IdempotencyKey.in_request(), "bad");
        assert_eq!(refusal(r, None).expression.as_deref(), Some("Idempotency-Key"));
        let r = Refusal::invalid(Field::PatientId.in_request(), "bad");
        assert_eq!(refusal(r, None).expression.as_deref(), Some("patient"));
        let r = Refusal::invalid(Field::DurationMinutes.in_request(), "bad");
        assert_eq!(refusal(r, None).expression.as_deref(), Some("durationMinutes"));
        let r = Refusal::invalid(Field::Id.as_param(), "bad");
        assert_eq!(refusal(r, Some("appointment")).expression.as_deref(), Some("appointment"));
        let r = Refusal::invalid(Field::Id.as_param(), "bad");
        assert_eq!(refusal(r, None).expression.as_deref(), Some("id"));
        let full = refusal(Refusal::new(RefusalCode::SlotFull, "full"), None);
        assert_eq!((full.code, full.expression), ("SLOT_FULL", None));
    }
}
