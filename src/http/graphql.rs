//! GraphQL over HTTP (the GraphQL-over-HTTP spec): `POST /graphql` with a JSON body (one
//! operation or a batch), `GET /graphql?query=…` for queries only, GraphiQL for browsers.
//!
//! Request errors (unreadable JSON, a document that does not parse or validate, limits) are
//! answered 400 with no `data` in `application/graphql-response+json` (200 for a legacy client
//! that accepts only `application/json`, as the spec asks); execution errors are 200 with
//! `data`. Every error carries `extensions.code`.

use std::{collections::HashMap, time::Instant};

use async_graphql::Variables;
use axum::{
    body::{to_bytes, Body, Bytes},
    extract::{Query, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::{json, Map, Value};

use super::{connection, AppState, Shared};
use crate::{
    auth::Principal,
    graphql::{error::code, Answered, Pipeline},
};

const GRAPHQL_RESPONSE: &str = "application/graphql-response+json";
const JSON: &str = "application/json";

/// `POST /graphql`.
pub(super) async fn post(State(state): Shared, headers: HeaderMap, body: Body) -> Response {
    let media = response_media(&headers);
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !content_type.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case(JSON) {
        let refused = request_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            media,
            "send the request as Content-Type: application/json",
        );
        // The body is left unread (see `connection`).
        return if connection::has_body(&headers) { connection::close(refused) } else { refused };
    }
    let limit = state.limits.max_body_bytes;
    // A declared length over the limit is refused before reading any of the body (a client
    // that waits for `100 Continue` then sends none of it); a longer body of chunks, once it
    // passes the limit. Both leave the rest unread, and the connection closes.
    let too_large = || {
        let message = format!("the request body is larger than {limit} bytes");
        connection::close(request_error(StatusCode::PAYLOAD_TOO_LARGE, media, &message))
    };
    if connection::declared_length(&headers).is_some_and(|n| n > limit as u64) {
        return too_large();
    }
    let bytes = match to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => return too_large(),
    };
    if let Some(kept) = kept_answer(&state, &headers, &bytes, media) {
        return kept;
    }
    // The common body, one operation, is read straight into its parts. Anything else (a batch,
    // or a body it refuses) goes the general way below, which also names the fault precisely.
    // `execute` is boxed: its future holds the operations and their state across its awaits,
    // and kept inline it would make this handler's future as large, copied at every layer it
    // passes (its own ways of answering are boxed in turn, see `execute`).
    if let Ok(operation) = serde_json::from_slice::<WireOperation>(&bytes) {
        return Box::pin(execute(&state, &headers, vec![operation.into_request()], false, Some(bytes), media)).await;
    }
    let parsed: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        // Unreadable JSON is 400 whatever the client accepts (the audit's BCF8).
        Err(e) => return request_error(StatusCode::BAD_REQUEST, media, &format!("the body is not valid JSON: {e}")),
    };
    let (items, batched) = match parsed {
        Value::Array(items) => (items, true),
        single => (vec![single], false),
    };
    if items.is_empty() || items.len() > state.limits.max_batch {
        return request_error(
            bad_request(media),
            media,
            &format!("a batch holds 1 to {} operations", state.limits.max_batch),
        );
    }
    let mut requests = Vec::with_capacity(items.len());
    for item in items {
        match graphql_request(item) {
            Ok(r) => requests.push(r),
            Err(msg) => return request_error(bad_request(media), media, &msg),
        }
    }
    let answer_key = (!batched).then_some(bytes);
    Box::pin(execute(&state, &headers, requests, batched, answer_key, media)).await
}

/// The kept answer to a request with exactly this body (slot lists and searches: see
/// [`Pipeline::kept`]), if any. A request with a bad token is left to the usual path, which
/// refuses it.
fn kept_answer(state: &AppState, headers: &HeaderMap, body: &[u8], media: &'static str) -> Option<Response> {
    let started = Instant::now();
    let (answer, operation) = state.pipeline.kept(body)?;
    authenticate(state, headers).ok()?;
    metrics::counter!("answer_cache_hits_total").increment(1);
    metrics::counter!("graphql_requests_total", "operation" => operation.clone(), "outcome" => "ok").increment(1);
    metrics::histogram!("graphql_request_seconds", "operation" => operation).record(started.elapsed().as_secs_f64());
    Some(respond(StatusCode::OK, media, answer, &request_id(headers)))
}

/// `GET /graphql`: GraphiQL for a browser, otherwise a query (never a mutation).
pub(super) async fn get(
    State(state): Shared,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !params.contains_key("query") && accept.contains("text/html") {
        return super::graphiql::page();
    }
    let media = response_media(&headers);
    let mut object = Map::new();
    for (k, v) in params {
        let value = match k.as_str() {
            "variables" | "extensions" => match serde_json::from_str(&v) {
                Ok(v) => v,
                Err(_) => return request_error(bad_request(media), media, &format!("{k} is not JSON")),
            },
            _ => Value::String(v),
        };
        object.insert(k, value);
    }
    let request = match graphql_request(Value::Object(object)) {
        Ok(r) => r,
        Err(msg) => return request_error(bad_request(media), media, &msg),
    };
    if Pipeline::writes(&request) {
        let mut resp = request_error(StatusCode::METHOD_NOT_ALLOWED, media, "mutations are sent with POST");
        resp.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
        return resp;
    }
    Box::pin(execute(&state, &headers, vec![request], false, None, media)).await
}

/// One operation in the spec's JSON shape, read without a JSON tree in between: the variables
/// become GraphQL values directly, which halves the work of reading a typical body. It accepts
/// exactly what [`graphql_request`] accepts, except duplicate keys (left to that path).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireOperation {
    /// The document.
    query: String,
    /// The variables; absent or null: none.
    #[serde(default)]
    variables: Variables,
    /// The operation to run.
    #[serde(default)]
    operation_name: Option<String>,
    /// Read only to refuse a value that is not an object; nothing uses it.
    #[serde(default, rename = "extensions")]
    _extensions: Option<Map<String, Value>>,
}

impl WireOperation {
    fn into_request(self) -> async_graphql::Request {
        let request = async_graphql::Request::new(self.query).variables(self.variables);
        match self.operation_name {
            Some(name) => request.operation_name(name),
            None => request,
        }
    }
}

/// Turns one JSON object into a request, checking the shape the spec requires.
fn graphql_request(item: Value) -> Result<async_graphql::Request, String> {
    let Value::Object(mut obj) = item else {
        return Err("each operation is a JSON object with a \"query\"".into());
    };
    let query = match obj.remove("query") {
        Some(Value::String(q)) => q,
        Some(_) => return Err("\"query\" must be a string".into()),
        None => return Err("the request has no \"query\"".into()),
    };
    let mut request = async_graphql::Request::new(query);
    match obj.remove("variables") {
        None | Some(Value::Null) => {}
        Some(v @ Value::Object(_)) => request = request.variables(Variables::from_json(v)),
        Some(_) => return Err("\"variables\" must be an object".into()),
    }
    match obj.remove("operationName") {
        None | Some(Value::Null) => {}
        Some(Value::String(name)) => request = request.operation_name(name),
        Some(_) => return Err("\"operationName\" must be a string".into()),
    }
    match obj.remove("extensions") {
        None | Some(Value::Null) | Some(Value::Object(_)) => {}
        Some(_) => return Err("\"extensions\" must be an object".into()),
    }
    Ok(request)
}

/// The client's `x-request-id` when it is a sensible one, else a new one.
fn request_id(headers: &HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

/// Runs the operations (several: a batch) through the answer pipeline and answers. `answer_key`,
/// the body of a single POST operation, is where its answer is kept when it is made only of
/// slot reads (lists and searches).
async fn execute(
    state: &AppState,
    headers: &HeaderMap,
    requests: Vec<async_graphql::Request>,
    batched: bool,
    answer_key: Option<Bytes>,
    media: &'static str,
) -> Response {
    let request_id = request_id(headers);
    let principal = match authenticate(state, headers) {
        Ok(p) => p,
        Err(msg) => {
            metrics::counter!("graphql_requests_total", "operation" => "unknown", "outcome" => code::UNAUTHENTICATED)
                .increment(1);
            let body = json!({ "errors": [{ "message": msg, "extensions": { "code": code::UNAUTHENTICATED } }] });
            let mut resp = respond(StatusCode::UNAUTHORIZED, media, body.to_string(), &request_id);
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return resp;
        }
    };
    let mut bodies = Vec::with_capacity(requests.len());
    let mut status = StatusCode::OK;
    let mut retry_after = None;
    // The stamps and operation name of an answer to keep (a single POST of slot reads).
    let mut keep = None;
    for request in requests {
        let operation = request.operation_name.clone().unwrap_or_else(|| "anonymous".into());
        let started = Instant::now();
        let answered = state.pipeline.answer(request, &principal, &request_id, answer_key.is_some()).await;
        let stamps = answered.keep.clone();
        let rendered = render(answered, &request_id);
        metrics::counter!("graphql_requests_total", "operation" => operation.clone(), "outcome" => rendered.outcome)
            .increment(1);
        metrics::histogram!("graphql_request_seconds", "operation" => operation.clone())
            .record(started.elapsed().as_secs_f64());
        if !batched {
            if rendered.request_error {
                status = bad_request(media);
            } else if rendered.outcome == code::RATE_LIMITED {
                status = StatusCode::TOO_MANY_REQUESTS;
                retry_after = rendered.retry_after;
            }
        }
        if let Some(stamps) = stamps {
            keep = Some((stamps, operation));
        }
        bodies.push(rendered.body);
    }
    let body = Bytes::from(if batched { format!("[{}]", bodies.join(",")) } else { bodies.pop().unwrap_or_default() });
    if let (Some(key), Some((stamps, operation))) = (answer_key, keep) {
        state.pipeline.keep(key, stamps, body.clone(), &operation);
    }
    let mut resp = respond(status, media, body, &request_id);
    if let Some(secs) = retry_after {
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    resp
}

/// The principal proven by the `Authorization` header; `Err` for a token that is presented
/// but not valid (refused on every operation, public ones included).
fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Principal, String> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(Principal::Anonymous);
    };
    let value = value.to_str().map_err(|_| "the Authorization header is not text".to_owned())?;
    crate::auth::principal_from_header(&state.tokens, value)
}

/// One executed operation, ready to send.
struct Rendered {
    /// The JSON text.
    body: String,
    /// `ok`, or the first error's code (a metrics label).
    outcome: &'static str,
    /// True when nothing was executed (a request error: 400 with no `data`).
    request_error: bool,
    /// `retryAfterSeconds` of a `RATE_LIMITED` first error.
    retry_after: Option<u64>,
}

/// Serializes an answer, adding the request id to `INTERNAL` errors. An answer without errors
/// (nearly all of them: refusals are data) is written straight to text, in one pass.
fn render(answered: Answered, request_id: &str) -> Rendered {
    let Answered { response, refused: request_error, .. } = answered;
    if response.errors.is_empty() {
        if let Ok(body) = serde_json::to_string(&response) {
            return Rendered { body, outcome: "ok", request_error: false, retry_after: None };
        }
    }
    let mut outcome = "ok";
    let mut body =
        serde_json::to_value(response).unwrap_or_else(|_| json!({ "errors": [{ "message": "internal error" }] }));
    if let Some(errors) = body.get_mut("errors").and_then(Value::as_array_mut) {
        for error in errors {
            let Some(ext) = error.get_mut("extensions").and_then(Value::as_object_mut) else { continue };
            let code = ext.get("code").and_then(Value::as_str).unwrap_or("").to_owned();
            if code == code::INTERNAL {
                ext.insert("requestId".into(), json!(request_id));
            }
            if outcome == "ok" {
                outcome = known_code(&code);
            }
        }
    }
    if request_error {
        if let Some(obj) = body.as_object_mut() {
            obj.remove("data");
        }
    }
    let retry_after = body.pointer("/errors/0/extensions/retryAfterSeconds").and_then(Value::as_u64);
    Rendered { body: body.to_string(), outcome, request_error, retry_after }
}

fn known_code(code: &str) -> &'static str {
    [
        code::UNAUTHENTICATED,
        code::FORBIDDEN,
        code::RATE_LIMITED,
        code::BAD_REQUEST,
        code::INVALID_INPUT,
        code::OVERLOADED,
        code::UNAVAILABLE,
        code::INTERNAL,
    ]
    .into_iter()
    .find(|c| *c == code)
    .unwrap_or("other")
}

/// The media type to answer with: `application/graphql-response+json` unless the client
/// asks for `application/json` only.
fn response_media(headers: &HeaderMap) -> &'static str {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains(GRAPHQL_RESPONSE) || !accept.contains(JSON) {
        GRAPHQL_RESPONSE
    } else {
        JSON
    }
}

/// The status of a request error: 400 with `application/graphql-response+json`; 200 for a
/// client that accepts only legacy `application/json`, as the GraphQL-over-HTTP spec asks.
fn bad_request(media: &'static str) -> StatusCode {
    if media == JSON {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    }
}

fn request_error(status: StatusCode, media: &'static str, message: &str) -> Response {
    metrics::counter!("graphql_requests_total", "operation" => "unknown", "outcome" => code::BAD_REQUEST).increment(1);
    let body = json!({ "errors": [{ "message": message, "extensions": { "code": code::BAD_REQUEST } }] });
    respond(status, media, body.to_string(), "")
}

fn respond(status: StatusCode, media: &'static str, body: impl Into<Body>, request_id: &str) -> Response {
    let mut resp = (status, body.into()).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(if media == JSON {
            "application/json"
        } else {
            "application/graphql-response+json; charset=utf-8"
        }),
    );
    if let Ok(v) = HeaderValue::from_str(request_id) {
        if !request_id.is_empty() {
            headers.insert("x-request-id", v);
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_read_directly_is_the_request_the_general_way_makes() -> Result<(), String> {
        for body in [
            r#"{"query":"{a}"}"#,
            r#"{"query":"query Q($s:ID!){a(s:$s)}","variables":{"s":"1","n":[1,-2,2.5,{"x":null}],"b":true},"operationName":"Q"}"#,
            r#"{"query":"{a}","variables":null,"operationName":null,"extensions":{"persistedQuery":{}}}"#,
            r#"{"query":"{a}","unknown":1,"extensions":null}"#,
        ] {
            let direct = serde_json::from_slice::<WireOperation>(body.as_bytes()).map_err(|e| e.to_string())?;
            let direct = direct.into_request();
            let general = graphql_request(serde_json::from_str(body).map_err(|e| e.to_string())?)?;
            assert_eq!(direct.query, general.query, "{body}");
            assert_eq!(direct.variables, general.variables, "{body}");
            assert_eq!(direct.operation_name, general.operation_name, "{body}");
        }
        Ok(())
    }

    #[test]
    fn bodies_the_direct_reading_refuses_go_the_general_way() {
        for body in [
            r#"[{"query":"{a}"}]"#,
            r#"{}"#,
            r#"{"query":1}"#,
            r#"{"query":"{a}","variables":[]}"#,
            r#"{"query":"{a}","operationName":1}"#,
            r#"{"query":"{a}","extensions":1}"#,
            r#"{"query":"{a}","query":"{b}"}"#,
        ] {
            assert!(serde_json::from_slice::<WireOperation>(body.as_bytes()).is_err(), "{body}");
        }
    }
}
