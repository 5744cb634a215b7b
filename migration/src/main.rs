//! `cargo run -p migration -- up|down|status|fresh`: the sea-orm migration CLI, reading
//! `DATABASE_URL`. The service also migrates at start-up and through `clinic-booking migrate`.

use sea_orm_migration::prelude::*;

#[tokio::main]
async fn main() {
    cli::run_cli(migration::Migrator).await;
}
