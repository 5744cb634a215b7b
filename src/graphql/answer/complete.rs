//! Completes an executed answer as the GraphQL spec words it, where async-graphql (7.2) does
//! not: a field whose resolver failed is left out of its object instead of being `null`, a
//! failed non-null field does not null its parent, and root fields come in the order they
//! finished rather than the order they were asked in.
//!
//! [`complete`] walks the operation's selections beside the answer with the field types of the
//! served schema (read once from its SDL): a missing nullable field becomes `null`, a missing
//! non-null one makes its parent `null` (up to `data` itself), and every object's keys follow
//! the selection. The error that made the field fail is already in `errors`. One exception:
//! a failed root field of a mutation is left out rather than nulling `data`, since the
//! mutations before it ran and their answers are the caller's only record of it. It runs only
//! on the executor's answers that need it ([`needed`]), never on the fast paths.

use std::{collections::HashMap, sync::OnceLock};

use async_graphql::{
    indexmap::IndexMap,
    parser::types::{
        BaseType, ExecutableDocument, OperationDefinition, OperationType, Selection, SelectionSet, Type, TypeKind,
        TypeSystemDefinition,
    },
    Name, Response, Value,
};

use crate::graphql::error::refused_as_a_whole;

/// Every object type's fields and their types, by name.
struct Shapes(HashMap<String, HashMap<String, Type>>);

impl Shapes {
    fn of_schema() -> Self {
        let mut types = HashMap::new();
        // The SDL is the schema's own; it always parses.
        if let Ok(document) = async_graphql::parser::parse_schema(crate::graphql::sdl()) {
            for definition in document.definitions {
                let TypeSystemDefinition::Type(ty) = definition else { continue };
                let ty = ty.node;
                if let TypeKind::Object(object) = ty.kind {
                    let fields =
                        object.fields.into_iter().map(|f| (f.node.name.node.to_string(), f.node.ty.node)).collect();
                    types.insert(ty.name.node.to_string(), fields);
                }
            }
        }
        Self(types)
    }

    fn field(&self, object: &str, field: &str) -> Option<&Type> {
        self.0.get(object)?.get(field)
    }
}

/// The type of `field` of the object type `object` in the served schema.
pub(super) fn field_type(object: &str, field: &str) -> Option<&'static Type> {
    shapes().field(object, field)
}

/// The fields of the object type `object` in the served schema (none for an unknown type).
#[cfg(test)]
pub(super) fn fields_of(object: &str) -> Vec<String> {
    shapes().0.get(object).map(|f| f.keys().cloned().collect()).unwrap_or_default()
}

fn shapes() -> &'static Shapes {
    static SHAPES: OnceLock<Shapes> = OnceLock::new();
    SHAPES.get_or_init(Shapes::of_schema)
}

/// Whether [`complete`] has anything to do for `op`'s answer: errors of fields that ran, or
/// several root fields to put in order. Not for a request refused as a whole: nothing ran.
pub(super) fn needed(op: &OperationDefinition, response: &Response) -> bool {
    !refused_as_a_whole(response) && (!response.errors.is_empty() || op.selection_set.node.items.len() > 1)
}

/// Completes `response.data` for `op` of `doc` (see the module's text), when [`needed`].
pub(super) fn complete(response: &mut Response, doc: &ExecutableDocument, op: &OperationDefinition) {
    if !needed(op, response) {
        return;
    }
    let (root, keep_ran) = match op.ty {
        OperationType::Query => ("Query", false),
        OperationType::Mutation => ("Mutation", true),
        OperationType::Subscription => return,
    };
    if response.data == Value::Null {
        response.data = Value::Object(IndexMap::new());
    }
    let walk = Walk { shapes: shapes(), doc };
    let fine = walk.object(&mut response.data, root, &[&op.selection_set.node], keep_ran);
    if !fine || matches!(&response.data, Value::Object(m) if m.is_empty()) {
        response.data = Value::Null;
    }
}

struct Walk<'a> {
    shapes: &'a Shapes,
    doc: &'a ExecutableDocument,
}

/// One field of a selection set, fragments flattened: its response key, its name, its own
/// selections, and whether a directive may have left it out.
struct Asked<'a> {
    key: &'a Name,
    name: &'a str,
    selections: &'a SelectionSet,
    conditional: bool,
}

impl<'a> Walk<'a> {
    /// Completes the object `value` of type `ty`, asked by `sets` (more than one where the
    /// document asks for one key twice: the spec merges them); false when it must become
    /// `null`. With `keep_ran`, a failed non-null field is left out instead.
    fn object(&self, value: &mut Value, ty: &str, sets: &[&'a SelectionSet], keep_ran: bool) -> bool {
        let Value::Object(map) = value else { return true };
        let mut asked = Vec::new();
        for set in sets {
            self.collect(set, false, &mut asked);
        }
        let mut completed = IndexMap::with_capacity(map.len());
        for field in &asked {
            if completed.contains_key(field.key) {
                continue;
            }
            let Some(field_type) = self.shapes.field(ty, field.name) else {
                // `__typename` and introspection: async-graphql's own, always there.
                if let Some(v) = map.shift_remove(field.key) {
                    completed.insert(field.key.clone(), v);
                }
                continue;
            };
            match map.shift_remove(field.key) {
                Some(mut v) => {
                    let merged: Vec<_> = asked.iter().filter(|a| a.key == field.key).map(|a| a.selections).collect();
                    if !self.value(&mut v, field_type, &merged) {
                        match (field_type.nullable, keep_ran) {
                            (true, _) => v = Value::Null,
                            (false, true) => continue,
                            (false, false) => return false,
                        }
                    }
                    completed.insert(field.key.clone(), v);
                }
                None if field.conditional || (keep_ran && !field_type.nullable) => {}
                None if field_type.nullable => {
                    completed.insert(field.key.clone(), Value::Null);
                }
                None => return false,
            }
        }
        // Nothing else should be left; if it is, it is kept, after the asked keys.
        completed.extend(map.drain(..));
        *map = completed;
        true
    }

    /// Completes `value` of type `ty`, asked by `sets`; false when it must become `null`.
    fn value(&self, value: &mut Value, ty: &Type, sets: &[&'a SelectionSet]) -> bool {
        match (&ty.base, value) {
            (_, Value::Null) => true,
            (BaseType::List(inner), Value::List(items)) => {
                for item in items.iter_mut() {
                    if !self.value(item, inner, sets) {
                        if !inner.nullable {
                            return false;
                        }
                        *item = Value::Null;
                    }
                }
                true
            }
            (BaseType::Named(name), value @ Value::Object(_)) => self.object(value, name, sets, false),
            _ => true,
        }
    }

    /// The fields `selections` asks for, in order, through fragments.
    fn collect(&self, selections: &'a SelectionSet, conditional: bool, out: &mut Vec<Asked<'a>>) {
        for selection in &selections.items {
            match &selection.node {
                Selection::Field(f) => out.push(Asked {
                    key: &f.node.response_key().node,
                    name: f.node.name.node.as_str(),
                    selections: &f.node.selection_set.node,
                    conditional: conditional || !f.node.directives.is_empty(),
                }),
                Selection::InlineFragment(inline) => self.collect(
                    &inline.node.selection_set.node,
                    conditional || !inline.node.directives.is_empty(),
                    out,
                ),
                Selection::FragmentSpread(spread) => {
                    if let Some(fragment) = self.doc.fragments.get(&spread.node.fragment_name.node) {
                        let skippable = !spread.node.directives.is_empty() || !fragment.node.directives.is_empty();
                        self.collect(&fragment.node.selection_set.node, conditional || skippable, out);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use async_graphql::{parser::parse_query, ServerError};
    use serde_json::json;

    use super::*;

    fn completed(query: &str, data: serde_json::Value) -> serde_json::Value {
        let doc = parse_query(query).unwrap();
        let op = crate::graphql::chosen_operation(&doc, None).unwrap();
        let mut response = Response::new(Value::from_json(data).unwrap());
        let mut error = ServerError::new("failed", None);
        error.extensions = Some(Default::default());
        response.errors.push(error);
        assert!(needed(op, &response));
        complete(&mut response, &doc, op);
        response.data.into_json().unwrap()
    }

    #[test]
    fn a_failed_nullable_field_is_null_and_roots_keep_their_order() {
        let q = r#"{ b: doctor(id: "2") { id } a: doctor(id: "x") { id } c: doctor(id: "3") { id name } }"#;
        let got = completed(q, json!({ "c": { "name": "C", "id": "3" }, "b": { "id": "2" } }));
        assert_eq!(got.to_string(), r#"{"b":{"id":"2"},"a":null,"c":{"id":"3","name":"C"}}"#);
    }

    #[test]
    fn a_failed_non_null_field_nulls_its_parent_up_to_data() {
        let got = completed(
            r#"{ doctor(id: "1") { name slots(date: "2030-01-01") { id } } }"#,
            json!({ "doctor": { "name": "A" } }),
        );
        assert_eq!(got, json!({ "doctor": null }));
        let got = completed(
            "{ doctors(first: 1) { nodes { id } } myAppointments { id } }",
            json!({ "doctors": { "nodes": [] } }),
        );
        assert_eq!(got, serde_json::Value::Null);
    }

    #[test]
    fn a_failed_mutation_leaves_the_answers_of_those_that_ran() {
        let q =
            r#"mutation { a: cancelAppointment(id: "1") { cancelled } b: cancelAppointment(id: "2") { cancelled } }"#;
        assert_eq!(completed(q, json!({ "a": { "cancelled": true } })), json!({ "a": { "cancelled": true } }));
        assert_eq!(completed(q, json!({})), serde_json::Value::Null);
    }

    #[test]
    fn a_key_asked_twice_is_completed_once_with_both_selections() {
        let q = r#"{ doctor(id: "1") { id } doctor(id: "1") { name } }"#;
        let got = completed(q, json!({ "doctor": { "name": "A", "id": "1" } }));
        assert_eq!(got.to_string(), r#"{"doctor":{"id":"1","name":"A"}}"#);
    }

    #[test]
    fn fragments_typename_and_skipped_fields_are_left_alone() {
        let q = r#"{ doctor(id: "1") { ...F name @skip(if: true) } __typename } fragment F on Doctor { id }"#;
        let got = completed(q, json!({ "__typename": "Query", "doctor": { "id": "1" } }));
        assert_eq!(got.to_string(), r#"{"doctor":{"id":"1"},"__typename":"Query"}"#);
    }
}
