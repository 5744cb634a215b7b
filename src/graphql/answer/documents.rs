//! Parsed GraphQL documents by query text, each with the variable shapes that passed validation.
//! Clients send the same few documents over and over (a widget's slot list, a partner's
//! booking mutation), and parsing one took about a tenth of the CPU of a rejected booking;
//! validating it, about an eighth (see `validated` for when that can be skipped).

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, OnceLock, PoisonError, RwLock},
};

use async_graphql::parser::{parse_query, types::ExecutableDocument};

use super::{book::BookPlan, list::ListPlan};

/// Documents kept; once full, new ones are parsed per request and not kept (a flood of
/// distinct documents costs what it cost before, no more).
const MAX_ENTRIES: usize = 512;
/// Longer query texts are not kept.
const MAX_QUERY_BYTES: usize = 8 * 1024;
/// Shapes remembered per document; past it, new shapes are validated in full every time.
const MAX_SHAPES: usize = 64;

/// A parsed document and what is known of it.
pub(super) struct Document {
    /// The parsed document.
    pub(super) doc: ExecutableDocument,
    /// Shapes of requests with this document that passed the full validation.
    shapes: RwLock<HashSet<String>>,
    /// The document as a booking the direct path answers, if it is one (compiled on first use).
    book_plan: OnceLock<Option<BookPlan>>,
    /// The document as a slot list the direct path answers, if it is one (compiled on first use).
    list_plan: OnceLock<Option<ListPlan>>,
}

impl Document {
    /// Whether a request of this shape passed validation before.
    pub(super) fn passed(&self, shape: &str) -> bool {
        self.shapes.read().unwrap_or_else(PoisonError::into_inner).contains(shape)
    }

    /// The document's plan for the direct booking path ([`BookPlan`]), if it has one. Only
    /// for requests of a shape that [`Document::passed`]: the plan trusts the validation.
    pub(super) fn book_plan(&self) -> Option<&BookPlan> {
        self.book_plan.get_or_init(|| BookPlan::compile(&self.doc)).as_ref()
    }

    /// The document's plan for the direct slot-list path ([`ListPlan`]), if it has one; like
    /// [`Document::book_plan`], only for requests of a shape that passed.
    pub(super) fn list_plan(&self) -> Option<&ListPlan> {
        self.list_plan.get_or_init(|| ListPlan::compile(&self.doc)).as_ref()
    }

    /// Remembers that a request of this shape passed validation.
    pub(super) fn remember(&self, shape: String) {
        let mut shapes = self.shapes.write().unwrap_or_else(PoisonError::into_inner);
        if shapes.len() < MAX_SHAPES {
            shapes.insert(shape);
        }
    }
}

fn cache() -> &'static RwLock<HashMap<String, Arc<Document>>> {
    static CACHE: OnceLock<RwLock<HashMap<String, Arc<Document>>>> = OnceLock::new();
    CACHE.get_or_init(|| RwLock::new(HashMap::new()))
}

/// The document of `query`: from the cache, or parsed now (and kept). `None` when it does not
/// parse: the executor then reports the error as usual.
pub(super) fn document(query: &str) -> Option<Arc<Document>> {
    if let Some(found) = cache().read().unwrap_or_else(PoisonError::into_inner).get(query) {
        return Some(Arc::clone(found));
    }
    let document = Arc::new(Document {
        doc: parse_query(query).ok()?,
        shapes: RwLock::default(),
        book_plan: OnceLock::new(),
        list_plan: OnceLock::new(),
    });
    if query.len() <= MAX_QUERY_BYTES {
        let mut map = cache().write().unwrap_or_else(PoisonError::into_inner);
        if map.len() < MAX_ENTRIES {
            map.insert(query.to_owned(), Arc::clone(&document));
        }
    }
    Some(document)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_document_is_the_parsed_one() {
        let query = "query CacheProbe { __typename }";
        let first = document(query);
        let second = document(query);
        assert!(cache().read().unwrap_or_else(PoisonError::into_inner).contains_key(query));
        assert_eq!(second.as_ref().map(|d| d.doc.operations.iter().count()), Some(1));
        assert!(document("query {").is_none());
        drop(first);
    }

    #[test]
    fn remembered_shapes_pass() {
        let Some(doc) = document("query ShapeProbe { __typename }") else {
            panic!("the probe parses");
        };
        assert!(!doc.passed("s"));
        doc.remember("s".into());
        assert!(doc.passed("s"));
    }
}
