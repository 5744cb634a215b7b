//! Answers after which the server closes the connection say so with `Connection: close`.
//!
//! hyper closes an HTTP/1.1 connection after an answer when the request's body was not read to
//! its end (the rest cannot be told from the next request), but it finds that out only after
//! the answer's head is written. Without the header, a keep-alive client sends its next request
//! on a connection about to close, and that request fails. With it, hyper closes after the
//! answer, and the client opens a new connection.
//!
//! Handlers that answer without reading a body mark their answer with [`close`]; the
//! [`UnreadBodies`] layer does it for the router's own refusals (no such route or method).

use std::task::{Context, Poll};

use axum::http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use futures_util::{
    future::{Either, MapOk},
    TryFutureExt,
};
use tower::{Layer, Service};

/// True when the request announces a body (a length above zero, or chunks).
pub(super) fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().parse::<u64>().map_or(true, |n| n > 0))
}

/// The body length the request declares, if it declares one.
pub(super) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// Marks an answer after which the connection closes.
pub(super) fn close<B>(mut response: Response<B>) -> Response<B> {
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Adds `Connection: close` to the router's 404 and 405 answers to requests with a body, which
/// no handler read. Requests without a body (nearly all but `POST /graphql`) pass untouched.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct UnreadBodies;

impl<S> Layer<S> for UnreadBodies {
    type Service = UnreadBodiesService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        UnreadBodiesService(inner)
    }
}

/// [`UnreadBodies`] around one service.
#[derive(Clone, Debug)]
pub(super) struct UnreadBodiesService<S>(S);

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for UnreadBodiesService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Either<MapOk<S::Future, fn(Response<ResBody>) -> Response<ResBody>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        if has_body(req.headers()) {
            Either::Left(self.0.call(req).map_ok(close_refusal))
        } else {
            Either::Right(self.0.call(req))
        }
    }
}

fn close_refusal<B>(response: Response<B>) -> Response<B> {
    match response.status() {
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => close(response),
        _ => response,
    }
}
