//! Which answers the answer cache ([`crate::guard::AnswerCache`]) may keep: those made only of
//! slot lists, whose every change it is told about.

use async_graphql::parser::types::{OperationDefinition, OperationType, Selection};

/// The root field whose answers depend only on one doctor's slots (the doctor's own fields
/// never change, and `Slot.doctor` is always that doctor).
const SLOT_LIST_FIELD: &str = "availableSlots";

/// Whether the answer to `op` is made only of slot lists: a query whose root fields are all
/// `availableSlots` (or `__typename`), with no directives at the root.
pub fn made_of_slot_lists(op: &OperationDefinition) -> bool {
    let roots = &op.selection_set.node.items;
    op.ty == OperationType::Query
        && op.directives.is_empty()
        && roots.iter().any(|s| matches!(&s.node, Selection::Field(f) if f.node.name.node == SLOT_LIST_FIELD))
        && roots.iter().all(|s| match &s.node {
            Selection::Field(f) => {
                f.node.directives.is_empty() && [SLOT_LIST_FIELD, "__typename"].contains(&f.node.name.node.as_str())
            }
            Selection::FragmentSpread(_) | Selection::InlineFragment(_) => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_graphql::parser::parse_query;

    fn check(query: &str, name: Option<&str>) -> bool {
        parse_query(query).is_ok_and(|doc| super::super::chosen_operation(&doc, name).is_some_and(made_of_slot_lists))
    }

    #[test]
    fn only_slot_list_queries_qualify() {
        let list = "query L($d:ID!,$t:Date!){availableSlots(doctorId:$d,date:$t){id doctor{name slots(date:$t){id}}}}";
        assert!(check(list, None));
        assert!(check(list, Some("L")));
        assert!(!check(list, Some("M")));
        assert!(check("{a:availableSlots(doctorId:\"1\",date:\"2030-01-01\"){id} __typename}", None));
        assert!(!check("{__typename}", None));
        assert!(!check("{availableSlots(doctorId:\"1\",date:\"2030-01-01\"){id} myAppointments{id}}", None));
        assert!(!check("{availableSlots(doctorId:\"1\",date:\"2030-01-01\") @include(if:true) {id}}", None));
        assert!(!check("{...F} fragment F on Query {availableSlots(doctorId:\"1\",date:\"2030-01-01\"){id}}", None));
        assert!(!check("mutation{availableSlots{id}}", None));
        assert!(!check("query A{availableSlots{id}} query B{availableSlots{id}}", None));
    }
}
