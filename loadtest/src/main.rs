//! `clinic-loadtest`: the project's load benchmark (see BENCHMARKS.md).
//!
//! - `seed`: migrates a PostgreSQL database and bulk-loads the benchmark data set (by default
//!   2,000 doctors × 14 days × 40 slots = 1,120,000 slots) with two set-based statements, then
//!   writes a manifest of doctor ids and dates for `run`.
//! - `run`: drives a running server over HTTP. Open model by default (`--rate`: requests are
//!   sent at fixed intended times whatever the server does, and latency is measured from the
//!   intended time, so queueing is not hidden by coordinated omission); `--connections N`
//!   switches to a closed loop of N connections for maximum-throughput runs. Prints achieved
//!   rate, p50/p99/max per operation and outcome counts, then checks in the database that every
//!   slot's `booked_count` equals its BOOKED appointments and never exceeds its capacity.
//!   `--contacts` and `--webhook` add the deliveries of every booking and their lag.
//!   `find-slots`, `find-worst` and `find-one` measure the slot search (docs/find-slots.md).
//! - `life`: the lifecycle's figures (holds, confirms, cancels with waiters, mass expiry).
//! - `receive`: the webhook receiver of `run --webhook`.
//! - `smtp-sink`: an SMTP server that accepts every message and keeps none, for the same runs.

mod check;
mod deliveries;
mod feed;
mod life;
mod load;
mod seed;
mod smtp_sink;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Load benchmark of clinic-booking.
#[derive(Parser)]
#[command(name = "clinic-loadtest")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Bulk-load the data set into PostgreSQL (migrating it first) and write the manifest.
    Seed(seed::SeedArgs),
    /// Drive a running server and report.
    Run(RunArgs),
    /// The lifecycle's figures: holds, confirms, cancels with waiters, mass expiry.
    Life(life::LifeArgs),
    /// A webhook receiver for `run --webhook`: answers every POST 204.
    Receive(deliveries::ReceiveArgs),
    /// An SMTP server for `run --contacts`: accepts every message, keeps none.
    SmtpSink(smtp_sink::SinkArgs),
}

/// What a run sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
    /// Bookings on a fresh set of 50 empty capacity-1 slots, plus slot-list reads of the grid.
    Opening,
    /// Slot lists only (random doctor and day of the grid).
    Reads,
    /// Bookings on 50 slots filled beforehand (every attempt is refused).
    Reject,
    /// Bookings on 50 slots of capacity 2,000,000,000 (every attempt commits).
    Success,
    /// 50 slot lists : 1 booking (on a fresh empty capacity-1 set).
    Mix,
    /// `findSlots`: a random specialty, a random start day of the grid, 14 days, first 20.
    FindSlots,
    /// `findSlots` for the specialty whose first 13 days the seed booked out, from the first
    /// day, 14 days, first 20 (the search's worst case).
    FindWorst,
    /// `findSlots` with `onePerDoctor`: a random specialty of 100+ doctors, a random start day,
    /// 14 days, first 100.
    FindOne,
}

/// Settings of `run`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct RunArgs {
    /// The scenario.
    #[arg(long, value_enum)]
    pub(crate) scenario: Scenario,
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub(crate) url: String,
    /// The server's JWT_SECRET (admin and partner tokens are minted with it).
    #[arg(long, env = "JWT_SECRET")]
    pub(crate) secret: String,
    /// The manifest written by `seed`.
    #[arg(long, default_value = "loadtest-seed.json")]
    pub(crate) seed: PathBuf,
    /// The server's database, for the final invariant check (skipped when absent).
    #[arg(long, env = "DATABASE_URL")]
    pub(crate) database_url: Option<String>,
    /// Seconds of load.
    #[arg(long, default_value_t = 30)]
    pub(crate) duration: u64,
    /// Open model: booking attempts per second (opening, reject, success) or operations per
    /// second in total (reads, mix).
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Open model, opening scenario: slot-list reads per second beside the bookings.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) read_rate: f64,
    /// Closed model: this many connections, each sending its next request when the last answer
    /// arrived (maximum throughput; latency then hides queueing, as wrk's does).
    #[arg(long, conflicts_with = "rate")]
    pub(crate) connections: Option<usize>,
    /// Slot lists per booking in the mix.
    #[arg(long, default_value_t = 50)]
    pub(crate) reads_per_write: u32,
    /// Open model: connections to the server (a request finding all busy waits for one, and the
    /// wait counts in its latency, as in wrk2).
    #[arg(long, default_value_t = 256)]
    pub(crate) max_connections: usize,
    /// Open model: requests in flight beyond which the generator skips a send (and counts it).
    #[arg(long, default_value_t = 8192)]
    pub(crate) max_in_flight: usize,
    /// Open model: seconds of the same load on another hot set first, not measured (connections
    /// and the server's pool warm, as before a real opening).
    #[arg(long, default_value_t = 0)]
    pub(crate) warmup: u64,
    /// Closed-model searches (find-slots, find-worst, find-one): beside them, this many bookings
    /// a second (open model) of random seeded slots, for new patients, so that answers the
    /// server keeps go stale as on a busy day (each booking ends its doctor's specialty's).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) book_rate: f64,
    /// Print p99 and max latency for each second of the run.
    #[arg(long)]
    pub(crate) timeline: bool,
    /// Write every measured answer as `op,sent_unix_ms,latency_us` to this CSV file, to read a
    /// window of the run afterwards (the seconds a horizon pass ran beside it, say).
    #[arg(long)]
    pub(crate) latencies: Option<PathBuf>,
    /// One SMART Scheduling Links aggregator polling the full FHIR feed every this many seconds
    /// during the measured load (the manifest, then the files that changed).
    #[arg(long)]
    pub(crate) poll_feed: Option<f64>,
    /// Give every patient the measured load books for an email address (needs --database-url;
    /// the server sends to its SMTP_URL), and report the messages' lag after the load.
    #[arg(long)]
    pub(crate) contacts: bool,
    /// Subscribe the partner to every event at this URL (`clinic-loadtest receive`; the server
    /// needs WEBHOOK_ALLOW_CIDRS for a loopback address), and report the deliveries' lag.
    #[arg(long)]
    pub(crate) webhook: Option<String>,
    /// Worker threads of the generator's runtime (default: one per core). A fixed two let the
    /// generator, which spends about as much CPU per request as the server, cap what a run on a
    /// many-core machine could show.
    #[arg(long, default_value_t = cores())]
    pub(crate) threads: usize,
}

/// The cores of this machine (1 when unknown).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let threads = match &cli.command {
        Command::Run(args) => args.threads.max(1),
        Command::Seed(_) | Command::Life(_) | Command::Receive(_) | Command::SmtpSink(_) => 2,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("clinic-loadtest: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Seed(args) => seed::run(args).await,
            Command::Run(args) => load::run(args).await,
            Command::Life(args) => life::run(args).await,
            Command::Receive(args) => deliveries::receive(args).await,
            Command::SmtpSink(args) => smtp_sink::run(args).await,
        }
    });
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("clinic-loadtest: the run failed its checks");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("clinic-loadtest: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
