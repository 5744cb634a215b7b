//! The committed `schema.graphql` is the schema the server serves.

#[test]
fn schema_graphql_matches_the_served_schema() {
    let served = clinic_booking::graphql::sdl();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema.graphql");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == served,
        "schema.graphql differs from the served schema; regenerate it with \
         `cargo run -- print-schema > schema.graphql` and review the diff"
    );
}
