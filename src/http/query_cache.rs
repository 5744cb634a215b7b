//! Parsed GraphQL documents by query text. Clients send the same few documents over and over
//! (a widget's slot list, a partner's booking mutation), and parsing one took about a tenth of
//! the CPU of a rejected booking; validation and execution still run for every request.

use std::{
    collections::HashMap,
    sync::{OnceLock, PoisonError, RwLock},
};

use async_graphql::parser::types::ExecutableDocument;

/// Documents kept; once full, new ones are parsed per request and not kept (a flood of
/// distinct documents costs what it cost before, no more).
const MAX_ENTRIES: usize = 512;
/// Longer query texts are not kept.
const MAX_QUERY_BYTES: usize = 8 * 1024;

fn cache() -> &'static RwLock<HashMap<String, ExecutableDocument>> {
    static CACHE: OnceLock<RwLock<HashMap<String, ExecutableDocument>>> = OnceLock::new();
    CACHE.get_or_init(|| RwLock::new(HashMap::new()))
}

/// `request` with its document parsed: from the cache, or parsed now (and kept). A document
/// that does not parse is left for the executor, which reports the error as usual.
pub(super) fn with_parsed_query(mut request: async_graphql::Request) -> async_graphql::Request {
    let cached = cache().read().unwrap_or_else(PoisonError::into_inner).get(&request.query).cloned();
    if let Some(doc) = cached {
        request.set_parsed_query(doc);
        return request;
    }
    if request.query.len() > MAX_QUERY_BYTES {
        return request;
    }
    let Ok(doc) = request.parsed_query().cloned() else {
        return request;
    };
    let mut map = cache().write().unwrap_or_else(PoisonError::into_inner);
    if map.len() < MAX_ENTRIES {
        map.insert(request.query.clone(), doc);
    }
    drop(map);
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_document_is_the_parsed_one() {
        let query = "query CacheProbe { __typename }";
        let first = with_parsed_query(async_graphql::Request::new(query));
        let mut second = with_parsed_query(async_graphql::Request::new(query));
        assert!(cache().read().unwrap_or_else(PoisonError::into_inner).contains_key(query));
        assert_eq!(second.parsed_query().map(|d| d.operations.iter().count()).ok(), Some(1));
        let mut bad = with_parsed_query(async_graphql::Request::new("query {"));
        assert!(bad.parsed_query().is_err());
        drop(first);
    }
}
