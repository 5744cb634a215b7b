//! The `clinic-booking` binary: `serve` (default), `migrate`, `roll-horizon`, `token`,
//! `print-schema`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use clinic_booking::{
    auth::{load_or_create_dev_secret, Claims, Role, TokenError, TokenIssuer},
    booking::BookingService,
    config::Config,
    db::{Db, PoolSettings},
    startup::{shutdown_signal, Application, StartupError},
    telemetry,
};

/// Appointment booking over GraphQL. Settings come from the environment (see README).
#[derive(Parser)]
#[command(name = "clinic-booking", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (the default).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Run one pass of the planning horizon (what every instance does every
    /// SCHEDULE_HORIZON_POLL_SECS), print what it made and how long it took, and exit.
    RollHorizon,
    /// Print a signed token for local use.
    Token {
        /// patient, doctor, admin or partner.
        #[arg(long)]
        role: Role,
        /// Subject: the patient id for patients.
        #[arg(long)]
        sub: String,
        /// The doctor's id, for doctor tokens.
        #[arg(long)]
        doctor_id: Option<String>,
        /// Hours until it expires.
        #[arg(long, default_value_t = 24)]
        ttl_hours: i64,
    },
    /// Print the GraphQL schema (SDL); `> schema.graphql` regenerates the committed copy.
    PrintSchema,
}

/// mimalloc instead of the system allocator: a GraphQL request makes many small short-lived
/// allocations, and glibc's malloc took about a fifth of the CPU under load (docs/benchmarks-history.md, first pass).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Serve);
    if let Command::PrintSchema = command {
        print!("{}", clinic_booking::graphql::sdl());
        return ExitCode::SUCCESS;
    }
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("clinic-booking: bad configuration: {e}");
            return ExitCode::from(2);
        }
    };
    let log_writer = telemetry::init(&config.telemetry);
    let result = run(command, config).await;
    // The log lines written so far come first.
    drop(log_writer);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Once, on stderr: the errors carry their cause in their own line (no source chain).
            eprintln!("clinic-booking: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The database of `config`, migrated, through a pool of `max_connections` for a one-off
/// command (no dedicated booking connections).
async fn migrated(config: &Config, max_connections: u32) -> Result<Db, StartupError> {
    let settings = PoolSettings {
        max_connections,
        acquire_timeout: std::time::Duration::from_secs(10),
        statement_timeout: std::time::Duration::from_secs(600),
        hot_connections: 0,
    };
    let target = &config.db.target;
    let db = Db::connect(target, &settings).await.map_err(|e| StartupError::database(target, &e))?;
    db.migrate().await.map_err(|e| StartupError::migrate(target, &e))?;
    Ok(db)
}

async fn run(command: Command, config: Config) -> anyhow::Result<()> {
    match command {
        Command::Serve => {
            let app = Application::build(config).await?;
            app.run_until_stopped(shutdown_signal()).await?;
        }
        Command::Migrate => {
            migrated(&config, 2).await?;
            println!("migrations applied");
        }
        Command::RollHorizon => {
            let db = migrated(&config, 8).await?;
            // The outbox rows it writes tell the running instances (their relays drain them).
            let bell = std::sync::Arc::new(tokio::sync::Notify::new());
            let service = BookingService::new(db, bell).with_settings(&config.booking);
            let started = std::time::Instant::now();
            let report = service.roll_horizon(None).await?;
            println!(
                "horizon rolled: {} doctors, {} slots made, {:.1} s",
                report.doctors,
                report.created,
                started.elapsed().as_secs_f64()
            );
        }
        Command::Token { role, sub, doctor_id, ttl_hours } => {
            let claims = Claims {
                sub,
                role: role.as_str().to_owned(),
                exp: chrono::Utc::now().timestamp() + ttl_hours * 3600,
                doctor_id,
            };
            // The server's own check of presented claims: a token it would refuse is not printed.
            if let Err(e) = claims.caller() {
                let reason = match e {
                    TokenError::Claims(reason) => reason,
                    other => other.to_string(),
                };
                anyhow::bail!("token: the server would refuse this token: {reason} (see --sub and --doctor-id)");
            }
            let secret = match config.auth.jwt_secret {
                Some(s) => s,
                None if !config.auth.issuers.is_empty() => {
                    anyhow::bail!("token: JWT_SECRET is not set and AUTH_ISSUERS is: get tokens from the providers")
                }
                None => {
                    load_or_create_dev_secret(&config.data_dir)
                        .map_err(|e| StartupError::dev_secret(&config.data_dir, &e))?
                        .0
                }
            };
            println!("{}", TokenIssuer::new(&secret)?.issue(&claims)?);
        }
        Command::PrintSchema => print!("{}", clinic_booking::graphql::sdl()),
    }
    Ok(())
}
