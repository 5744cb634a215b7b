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
//! kind of its value (or the number itself); the shapes that passed are kept with the parsed
//! document (`documents`), which stands for the text. Once a shape passed the full
//! validation, later requests of that shape run on a schema in async-graphql's fast validation
//! mode, which still enforces the depth and complexity limits. A `Date` variable (every slot
//! list has one) counts as a kind of its own when the scalar itself accepts the string, and
//! makes the request be validated in full otherwise. Operations with variables of other types
//! (other custom scalars, enums, input objects, lists) are always validated in full, and a
//! shape is only remembered after a pass, so no request is ever accepted that the full
//! validation would refuse.

use std::fmt::Write;

use async_graphql::{
    parser::types::{BaseType, OperationDefinition},
    Value, Variables,
};

use crate::graphql::scalars::Date;

/// Declared variable types whose valid values are told apart by kind (and numbers by value).
const BUILT_IN: [&str; 5] = ["ID", "String", "Boolean", "Int", "Float"];

/// The shape of a request running the operation `op` (named `name`) of a document, with these
/// variables (see the module's doc); kept per document, so the query text is not part of it.
/// `None` when the request's validity may depend on more than its shape.
pub(super) fn shape(name: Option<&str>, op: &OperationDefinition, variables: &Variables) -> Option<String> {
    let mut shape = String::with_capacity(64);
    shape.push_str(name.unwrap_or(""));
    shape.push('\n');
    for def in &op.variable_definitions {
        let BaseType::Named(ty) = &def.node.var_type.node.base else {
            return None;
        };
        let name = def.node.name.node.as_str();
        if ty.as_str() == "Date" {
            // Any string the scalar reads is as valid as any other; anything else is checked.
            let Some(Value::String(s)) = variables.get(name) else {
                return None;
            };
            Date::read(s)?;
            let _ = write!(shape, "{name}=date;");
            continue;
        }
        if !BUILT_IN.contains(&ty.as_str()) {
            return None;
        }
        let kind = match variables.get(name) {
            None => "-",
            Some(Value::Null) => "null",
            Some(Value::String(_)) => "string",
            Some(Value::Boolean(_)) => "bool",
            Some(Value::Number(n)) => {
                let _ = write!(shape, "{name}={n};");
                continue;
            }
            Some(_) => "other",
        };
        let _ = write!(shape, "{name}={kind};");
    }
    Some(shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_graphql::parser::parse_query;
    use serde_json::json;

    fn shape_of(query: &str, name: Option<&str>, vars: serde_json::Value) -> Option<String> {
        let doc = parse_query(query).ok()?;
        shape(name, crate::graphql::chosen_operation(&doc, name)?, &Variables::from_json(vars))
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
    fn dates_the_scalar_reads_are_one_kind_and_others_are_validated_in_full() {
        const LIST: &str = "query($d:ID!,$t:Date!){a(d:$d,t:$t)}";
        let a = shape_of(LIST, None, json!({ "d": "1", "t": "2030-01-01" }));
        assert!(a.is_some());
        assert_eq!(a, shape_of(LIST, None, json!({ "d": "2", "t": "2031-12-31" })));
        for bad in [json!("2030-02-30"), json!("2030-1-1"), json!(20300101), json!(null)] {
            assert!(shape_of(LIST, None, json!({ "d": "1", "t": bad })).is_none(), "{bad}");
        }
        assert!(shape_of(LIST, None, json!({ "d": "1" })).is_none());
    }

    #[test]
    fn other_variable_types_are_always_validated_in_full() {
        assert!(shape_of("query($m:Minutes!){a(m:$m)}", None, json!({ "m": "30" })).is_none());
        assert!(shape_of("query($i:[ID!]!){a(i:$i)}", None, json!({ "i": [] })).is_none());
        assert!(shape_of("mutation($in:BookInput!){a(in:$in)}", None, json!({ "in": {} })).is_none());
        assert!(shape_of("query A{a} query B{b}", None, json!({})).is_none());
        assert!(shape_of("query A{a} query B{b}", Some("B"), json!({})).is_some());
    }
}
