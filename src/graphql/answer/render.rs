//! An answer written as the JSON text that goes out: once for the client, and the same text is
//! what a kept answer serves again.

use async_graphql::Response;
use axum::body::Bytes;
use serde_json::{json, Value};

use crate::graphql::error::code;

/// One answered operation, as JSON text.
#[derive(Clone, Debug)]
pub struct Rendered {
    /// The JSON text.
    pub body: Bytes,
    /// `ok`, or the first error's code (a metrics label).
    pub outcome: &'static str,
    /// True when nothing was executed (a request error: no `data`).
    pub request_error: bool,
    /// `retryAfterSeconds` of the first error, when it has one (`RATE_LIMITED`, `OVERLOADED`).
    pub retry_after: Option<u64>,
}

/// Serializes `response`, adding the request id to `INTERNAL` errors and leaving `data` out of
/// a request refused as a whole (`refused`). An answer without errors (nearly all of them:
/// refusals are data) is written straight to text, in one pass.
pub(super) fn render(response: Response, refused: bool, request_id: &str) -> Rendered {
    if response.errors.is_empty() {
        if let Ok(body) = serde_json::to_string(&response) {
            return Rendered { body: body.into(), outcome: "ok", request_error: false, retry_after: None };
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
    if refused {
        if let Some(obj) = body.as_object_mut() {
            obj.remove("data");
        }
    }
    let retry_after = body.pointer("/errors/0/extensions/retryAfterSeconds").and_then(Value::as_u64);
    Rendered { body: body.to_string().into(), outcome, request_error: refused, retry_after }
}

/// The metrics label of an error code: one of the top-level codes, or `other`.
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
