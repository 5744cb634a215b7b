//! `cargo run -p migration -- up|down|status|fresh`: the sea-orm migration CLI, reading
//! `DATABASE_URL`. The service also migrates at start-up and through `clinic-booking migrate`.
//!
//! Without `DATABASE_URL` (nor `-u`, nor a `.env` file), it works on the service's own default:
//! the SQLite file `clinic-booking.sqlite3` in `DATA_DIR` (default: the current directory), when
//! that file exists; otherwise it says what to set.

use std::{path::PathBuf, process::ExitCode};

use sea_orm_migration::prelude::*;

#[tokio::main]
async fn main() -> ExitCode {
    if let Err(message) = default_database_url() {
        eprintln!("migration: {message}");
        return ExitCode::from(2);
    }
    cli::run_cli(migration::Migrator).await;
    ExitCode::SUCCESS
}

/// Sets `DATABASE_URL` to the service's default SQLite file when nothing names a database.
fn default_database_url() -> Result<(), String> {
    let named = std::env::var_os("DATABASE_URL").is_some_and(|v| !v.is_empty())
        || std::env::args().any(|a| a == "-u" || a.starts_with("--database-url"))
        || std::path::Path::new(".env").exists();
    if named {
        return Ok(());
    }
    let dir = PathBuf::from(std::env::var_os("DATA_DIR").unwrap_or_else(|| ".".into()));
    let file = dir.join("clinic-booking.sqlite3");
    if !file.exists() {
        return Err(format!(
            "DATABASE_URL is not set and the service's default SQLite file {} does not exist: set \
             DATABASE_URL=postgres://USER@HOST:PORT/DB or sqlite://PATH (or DATA_DIR), or run the \
             service once (`cargo run`) to create the default file",
            file.display()
        ));
    }
    eprintln!("migration: DATABASE_URL is not set: using the service's default SQLite file {}", file.display());
    // Single-threaded here, before the runtime starts anything that reads the environment.
    std::env::set_var("DATABASE_URL", format!("sqlite://{}", file.display()));
    Ok(())
}
