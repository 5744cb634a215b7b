//! Requests whose validation is already known to pass, so they can skip it.
//!
//! Validating a booking mutation (about twenty rules over the document) was an eighth of the
//! CPU of a rejected booking, and a partner sends the same document thousands of times with
//! only the variables' values changing. The verdict depends on those values in one way only:
//! whether each is a valid input for its declared type. For the built-in scalars that is fixed
//! by the value's kind (any string is a valid `String` or `ID`, any boolean a `Boolean`), except
//! for numbers (`Int` has a range), which are kept whole.
//!
//! So a request's *shape* is its query text, operation name and, per declared variable, the
//! kind of its value (or the number itself). Once a shape passed the full validation, later
//! requests of that shape run on a schema in async-graphql's fast validation mode, which still
//! enforces the depth and complexity limits. Operations with variables of other types (custom
//! scalars such as `Date`, enums, input objects, lists) are always validated in full, and a
//! shape is only remembered after a pass, so no request is ever accepted that the full
//! validation would refuse.

use std::{
    collections::HashSet,
    fmt::Write,
    sync::{PoisonError, RwLock},
};

use async_graphql::{
    parser::types::{BaseType, ExecutableDocument},
    Value, Variables,
};

/// Shapes remembered; once full, new shapes are validated in full every time.
const MAX_SHAPES: usize = 4096;
/// Longer query texts are not remembered.
const MAX_QUERY_BYTES: usize = 8 * 1024;
/// Declared variable types whose valid values are told apart by kind (and numbers by value).
const BUILT_IN: [&str; 5] = ["ID", "String", "Boolean", "Int", "Float"];

/// The shapes of this instance that passed validation.
#[derive(Default)]
pub struct ValidatedShapes {
    shapes: RwLock<HashSet<String>>,
}

impl ValidatedShapes {
    /// Whether this shape passed validation before.
    pub fn passed(&self, shape: &str) -> bool {
        self.shapes.read().unwrap_or_else(PoisonError::into_inner).contains(shape)
    }

    /// Remembers that this shape passed validation.
    pub fn remember(&self, shape: String) {
        let mut shapes = self.shapes.write().unwrap_or_else(PoisonError::into_inner);
        if shapes.len() < MAX_SHAPES {
            shapes.insert(shape);
        }
    }
}

/// The shape of a request (see the module's doc), or `None` when its validity may depend on
/// more than its shape.
pub(super) fn shape(
    query: &str,
    doc: &ExecutableDocument,
    operation: Option<&str>,
    variables: &Variables,
) -> Option<String> {
    if query.len() > MAX_QUERY_BYTES {
        return None;
    }
    let mut operations = doc.operations.iter();
    let (_, op) = match operation {
        Some(name) => operations.find(|(n, _)| n.map(|n| n.as_str()) == Some(name))?,
        None => match (operations.next(), operations.next()) {
            (Some(only), None) => only,
            _ => return None,
        },
    };
    let mut shape = String::with_capacity(query.len() + 64);
    shape.push_str(operation.unwrap_or(""));
    shape.push('\n');
    for def in &op.node.variable_definitions {
        let BaseType::Named(ty) = &def.node.var_type.node.base else {
            return None;
        };
        if !BUILT_IN.contains(&ty.as_str()) {
            return None;
        }
        let kind = match variables.get(def.node.name.node.as_str()) {
            None => "-".to_owned(),
            Some(Value::Null) => "null".to_owned(),
            Some(Value::String(_)) => "string".to_owned(),
            Some(Value::Boolean(_)) => "bool".to_owned(),
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => "other".to_owned(),
        };
        let _ = write!(shape, "{}={kind};", def.node.name.node);
    }
    shape.push('\n');
    shape.push_str(query);
    Some(shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_graphql::parser::parse_query;
    use serde_json::json;

    fn shape_of(query: &str, name: Option<&str>, vars: serde_json::Value) -> Option<String> {
        let doc = parse_query(query).ok()?;
        shape(query, &doc, name, &Variables::from_json(vars))
    }

    const BOOK: &str = "mutation B($s:ID!,$k:String!,$n:Int){x(s:$s,k:$k,n:$n)}";

    #[test]
    fn shapes_tell_kinds_and_numbers_apart_but_not_strings() {
        let a = shape_of(BOOK, None, json!({ "s": "1", "k": "a", "n": 5 }));
        assert!(a.is_some());
        assert_eq!(a, shape_of(BOOK, None, json!({ "s": "99", "k": "other key", "n": 5 })));
        assert_ne!(a, shape_of(BOOK, None, json!({ "s": 1, "k": "a", "n": 5 })));
        assert_ne!(a, shape_of(BOOK, None, json!({ "s": "1", "k": "a", "n": 6 })));
        assert_ne!(a, shape_of(BOOK, None, json!({ "s": "1", "k": "a" })));
        assert_ne!(a, shape_of(BOOK, None, json!({ "s": "1", "k": ["a"], "n": 5 })));
        assert_ne!(a, shape_of(BOOK, Some("B"), json!({ "s": "1", "k": "a", "n": 5 })));
    }

    #[test]
    fn other_variable_types_are_always_validated_in_full() {
        assert!(shape_of("query($t:Date!){a(t:$t)}", None, json!({ "t": "2030-01-01" })).is_none());
        assert!(shape_of("query($i:[ID!]!){a(i:$i)}", None, json!({ "i": [] })).is_none());
        assert!(shape_of("mutation($in:BookInput!){a(in:$in)}", None, json!({ "in": {} })).is_none());
        assert!(shape_of("query A{a} query B{b}", None, json!({})).is_none());
        assert!(shape_of("query A{a} query B{b}", Some("B"), json!({})).is_some());
    }

    #[test]
    fn remembered_shapes_pass() {
        let shapes = ValidatedShapes::default();
        assert!(!shapes.passed("s"));
        shapes.remember("s".into());
        assert!(shapes.passed("s"));
    }
}
