//! CORS for the routes browsers call from pages of other sites (`CORS_ALLOWED_ORIGINS`).
//!
//! A request from an allowed origin goes through tower-http's CORS layer, which answers its
//! preflight and adds the headers to the answer. Any other request passes by it untouched, so a
//! refused origin sees no CORS header at all (its preflight is answered 204 with only `Vary`),
//! and the requests that make up nearly all traffic, without `Origin`, cost one header lookup.
//!
//! The policy: methods `GET`, `POST`, `OPTIONS`; request headers `Authorization`,
//! `Content-Type`, `x-request-id`; exposed `x-request-id` and `Retry-After`; credentials
//! allowed for listed origins (never with `*`, which the Fetch standard forbids); preflights
//! cached for [`MAX_AGE`].

use std::{
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::http::{header, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use futures_util::{
    future::{Either, MapOk, Ready},
    TryFutureExt,
};
use tower::{Layer, Service};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// How long a browser may reuse a preflight's answer: ten minutes, so a page pays one preflight
/// round trip per ten minutes and request shape, and an origin removed from the list can no
/// longer send requests (as opposed to reading answers, refused at once) ten minutes later.
/// Chromium caps the value at two hours, Firefox at a day.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(600);

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// FHIR's `Prefer: return=…`.
const PREFER: HeaderName = HeaderName::from_static("prefer");

/// The header FHIR's `$hold` and `$book` take their retry key from.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// What a cache must key a CORS-capable answer by (tower-http's list, for answers it makes).
const VARY: HeaderValue =
    HeaderValue::from_static("origin, access-control-request-method, access-control-request-headers");

/// The CORS policy as a layer, built once in [`super::router`] from the configuration.
///
/// Another router browsers call from other sites gets exactly the same policy by one call on
/// its routes before merging, as the `/fhir` routes do (`fhir::router(…).layer(cors.clone())`):
/// every route it holds then answers preflights and carries the headers.
#[derive(Clone)]
pub(crate) struct Cors {
    origins: Arc<AllowedOrigins>,
    layer: Arc<CorsLayer>,
}

impl Cors {
    /// The policy for these origins.
    pub(crate) fn new(origins: AllowedOrigins) -> Self {
        let layer = CorsLayer::new()
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            // The FHIR operations read the last three (`$hold`/`$book` retries, `Prefer`, feed
            // revalidation); a browser may send none of them cross-site unless allowed here.
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                REQUEST_ID,
                IDEMPOTENCY_KEY,
                PREFER,
                header::IF_NONE_MATCH,
            ])
            .expose_headers([REQUEST_ID, header::RETRY_AFTER, header::LOCATION, header::ETAG])
            .max_age(MAX_AGE);
        let layer = match origins {
            AllowedOrigins::Any => layer.allow_origin(AllowOrigin::any()),
            // Only origins found allowed reach the layer, so it can echo the request's.
            AllowedOrigins::List(_) | AllowedOrigins::Loopback => {
                layer.allow_origin(AllowOrigin::mirror_request()).allow_credentials(true)
            }
        };
        Self { origins: Arc::new(origins), layer: Arc::new(layer) }
    }
}

impl<S: Clone> Layer<S> for Cors {
    type Service = CorsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CorsService { layer: Arc::clone(&self.layer), plain: inner, origins: Arc::clone(&self.origins) }
    }
}

/// [`Cors`] around one service.
///
/// axum clones a route's service for every request, so this holds the policy behind an `Arc`
/// and makes tower-http's service (a clone of the whole policy) only for requests it serves.
#[derive(Clone)]
pub(crate) struct CorsService<S> {
    layer: Arc<CorsLayer>,
    plain: S,
    origins: Arc<AllowedOrigins>,
}

type Plain<F, B> = MapOk<F, fn(Response<B>) -> Response<B>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for CorsService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Default,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    #[allow(clippy::type_complexity)]
    type Future = Either<
        <tower_http::cors::Cors<S> as Service<Request<ReqBody>>>::Future,
        Either<Plain<S::Future, ResBody>, Ready<Result<Response<ResBody>, S::Error>>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // tower-http's service, made in `call`, wraps a clone of this ready one (an axum
        // route: always ready).
        self.plain.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let origin = req.headers().get(header::ORIGIN);
        let allowed = match origin.and_then(|o| o.to_str().ok()) {
            Some(origin) => self.origins.allows(origin),
            // `*` answers every request alike; an answer without `Origin` is then no different.
            None => origin.is_none() && matches!(*self.origins, AllowedOrigins::Any),
        };
        if allowed {
            return Either::Left(self.layer.layer(self.plain.clone()).call(req));
        }
        let preflight = req.method() == Method::OPTIONS
            && origin.is_some()
            && req.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        if preflight {
            let mut refused = Response::new(ResBody::default());
            *refused.status_mut() = StatusCode::NO_CONTENT;
            refused.headers_mut().insert(header::VARY, VARY);
            return Either::Right(Either::Right(futures_util::future::ready(Ok(refused))));
        }
        let vary: fn(Response<ResBody>) -> Response<ResBody> =
            if self.origins.is_none() { std::convert::identity } else { add_vary };
        Either::Right(Either::Left(self.plain.call(req).map_ok(vary)))
    }
}

/// An answer that would carry CORS headers for another origin says so to caches.
fn add_vary<B>(mut response: Response<B>) -> Response<B> {
    response.headers_mut().append(header::VARY, VARY);
    response
}

/// The browser origins allowed to call the API from pages of other sites (CORS) and to open
/// WebSockets (`CORS_ALLOWED_ORIGINS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowedOrigins {
    /// Any origin (`*`); responses then allow no credentials.
    Any,
    /// Exactly these origins, as browsers write them: `scheme://host[:port]`, lower case, no
    /// default port. Empty: no other site (the production default).
    List(Vec<String>),
    /// Any `http` origin on this machine (`localhost`, `127.0.0.1`, `[::1]`, any port): the
    /// default in single-process dev mode, for a front end served by a local dev server.
    Loopback,
}

impl AllowedOrigins {
    /// Parses a `CORS_ALLOWED_ORIGINS` value: `*`, or origins separated by commas (empty
    /// entries are ignored). `Err` carries the bad entry and why.
    pub fn parse(value: &str) -> Result<Self, (String, String)> {
        let entries: Vec<&str> = value.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
        if entries.contains(&"*") {
            if entries.len() > 1 {
                return Err(("*".into(), "* (any origin) stands alone, without other origins".into()));
            }
            return Ok(Self::Any);
        }
        let mut origins = Vec::with_capacity(entries.len());
        for entry in entries {
            let origin = normalize_origin(entry).map_err(|reason| (entry.to_owned(), reason))?;
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        Ok(Self::List(origins))
    }

    /// True when a browser page of `origin` (an `Origin` header's value) may call the API.
    pub fn allows(&self, origin: &str) -> bool {
        match self {
            Self::Any => true,
            Self::List(origins) => origins.iter().any(|o| o.eq_ignore_ascii_case(origin)),
            Self::Loopback => normalize_origin(origin).is_ok_and(|o| {
                let Some(authority) = o.strip_prefix("http://") else { return false };
                let host = match authority.rsplit_once(':') {
                    Some((host, port)) if !port.contains(']') => host,
                    _ => authority,
                };
                matches!(host, "localhost" | "127.0.0.1" | "[::1]")
            }),
        }
    }

    /// True when no other site is allowed at all.
    pub fn is_none(&self) -> bool {
        matches!(self, Self::List(origins) if origins.is_empty())
    }
}

/// An origin as browsers serialize it (lower case, no default port), or why `raw` is none.
fn normalize_origin(raw: &str) -> Result<String, String> {
    const SHAPE: &str = "an origin is scheme://host[:port], e.g. https://app.example.com";
    let Some((scheme, authority)) = raw.split_once("://") else {
        return Err(format!("{SHAPE} (no scheme:// found)"));
    };
    let scheme = scheme.to_ascii_lowercase();
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !scheme_ok {
        return Err(format!("{SHAPE} (bad scheme)"));
    }
    if authority.contains(['/', '?', '#']) {
        return Err(format!("{SHAPE}, without a path, not even a trailing /"));
    }
    if authority.contains('@') {
        return Err(format!("{SHAPE}, without user name or password"));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (addr, rest) = v6.split_once(']').ok_or_else(|| format!("{SHAPE} (unclosed [ of an IPv6 address)"))?;
            if addr.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!("{SHAPE} ({addr} is not an IPv6 address)"));
            }
            let port = match rest {
                "" => None,
                _ => Some(rest.strip_prefix(':').ok_or_else(|| format!("{SHAPE} (text after the IPv6 address)"))?),
            };
            (format!("[{}]", addr.to_ascii_lowercase()), port)
        }
        None => {
            let (host, port) = match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            };
            let host_ok = !host.is_empty()
                && !host.starts_with(['.', '-'])
                && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b));
            if !host_ok {
                return Err(format!("{SHAPE} (bad host {host:?})"));
            }
            (host.to_ascii_lowercase(), port)
        }
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(format!("{SHAPE} (bad port {p:?})")),
        },
    };
    let default_port = match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    Ok(match port {
        Some(n) if Some(n) != default_port => format!("{scheme}://{host}:{n}"),
        _ => format!("{scheme}://{host}"),
    })
}

#[cfg(test)]
mod tests {
    use axum::{body::Body, routing::get, Router};
    use tower::ServiceExt;

    use super::*;

    fn preflight(origin: &str) -> Request<Body> {
        Request::builder()
            .method(Method::OPTIONS)
            .uri("/fhir/metadata")
            .header(header::ORIGIN, origin)
            .header(header::ACCESS_CONTROL_REQUEST_METHOD, "GET")
            .body(Body::empty())
            .unwrap_or_default()
    }

    /// What the doc comment of [`Cors`] promises another router: one `.layer` call.
    #[tokio::test]
    async fn a_whole_router_takes_the_policy_in_one_call() {
        let origins = AllowedOrigins::List(vec!["https://app.example.com".into()]);
        let fhir: Router = Router::new().route("/fhir/metadata", get(|| async { "{}" })).layer(Cors::new(origins));
        let allowed = fhir.clone().oneshot(preflight("https://app.example.com")).await.unwrap_or_default();
        assert_eq!(
            allowed.headers().get(header::ACCESS_CONTROL_ALLOW_ORIGIN).map(|v| v.as_bytes()),
            Some(&b"https://app.example.com"[..])
        );
        let refused = fhir.oneshot(preflight("https://evil.example.com")).await.unwrap_or_default();
        assert_eq!(refused.status(), StatusCode::NO_CONTENT);
        assert!(!refused.headers().keys().any(|k| k.as_str().starts_with("access-control-")));
    }

    #[test]
    fn origins_match_as_browsers_send_them() -> Result<(), (String, String)> {
        let list = AllowedOrigins::parse("https://app.example.com, http://localhost:3000")?;
        assert!(list.allows("https://app.example.com"));
        assert!(list.allows("http://localhost:3000"));
        for refused in ["http://app.example.com", "https://app.example.com:8443", "http://localhost:3001", "null"] {
            assert!(!list.allows(refused), "{refused}");
        }
        let dev = AllowedOrigins::Loopback;
        for ok in ["http://localhost", "http://localhost:5173", "http://127.0.0.1:8080", "http://[::1]:3000"] {
            assert!(dev.allows(ok), "{ok}");
        }
        for refused in ["https://localhost", "http://localhost.evil.com", "http://127.0.0.2", "http://evil.com", "null"]
        {
            assert!(!dev.allows(refused), "{refused}");
        }
        assert!(AllowedOrigins::Any.allows("https://anything.example"));
        assert!(!AllowedOrigins::parse("")?.allows("http://localhost"));
        Ok(())
    }
}
