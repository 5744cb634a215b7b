//! Where the test servers keep their data, chosen once per test process (see README, "Two
//! commands"):
//!
//! 1. `DATABASE_URL` (and `REDIS_URL`) when set: `postgres://…` is a server on which each test
//!    makes its own database; any `sqlite:` value means a new SQLite file per test, no Redis.
//! 2. Otherwise, when a Docker engine answers (`DOCKER_HOST`, or the usual sockets), PostgreSQL
//!    and Redis containers started with testcontainers.
//! 3. Otherwise a throwaway PostgreSQL and Redis started from this machine's own binaries
//!    (`pg_config --bindir` or `/usr/lib/postgresql/<version>/bin`, `redis-server` on `PATH`)
//!    on free ports of 127.0.0.1, with their data in a temporary directory.
//! 4. With none of these, the run stops with one message that says what to install or set.
//!
//! Rust's test harness has no global teardown, so what 2 and 3 start is removed by a small
//! watchdog process: it waits for the end of this test process (its standard input is a pipe
//! that only this process holds open, which closes however the process ends) and then stops
//! the servers and removes their directory.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

/// Where tests keep their data.
#[derive(Clone, Debug)]
pub(crate) enum Backend {
    /// A PostgreSQL server (URL of its maintenance database) and maybe Redis.
    Postgres { server_url: String, redis_url: Option<String> },
    /// Embedded SQLite files.
    Sqlite,
}

/// The backend chosen for this test process (see the module doc).
pub(crate) fn backend() -> Backend {
    static BACKEND: OnceLock<Backend> = OnceLock::new();
    BACKEND.get_or_init(choose).clone()
}

/// True when the test servers share a Redis.
pub(crate) fn has_redis() -> bool {
    matches!(backend(), Backend::Postgres { redis_url: Some(_), .. })
}

fn choose() -> Backend {
    let redis_url = std::env::var("REDIS_URL").ok().filter(|v| !v.is_empty());
    match std::env::var("DATABASE_URL").ok().filter(|v| !v.is_empty()) {
        Some(url) if url.starts_with("sqlite:") => return Backend::Sqlite,
        Some(url) => return Backend::Postgres { server_url: url, redis_url },
        None => {}
    }
    let mut tried = Vec::new();
    match docker::engine() {
        Some(host) => match docker::start() {
            Ok(backend) => {
                note(&format!(
                    "no DATABASE_URL: PostgreSQL and Redis run in containers of the Docker engine at {host}"
                ));
                return backend;
            }
            Err(e) => {
                tried.push(format!("the Docker engine at {host} answered, but the containers did not start: {e}"))
            }
        },
        None => tried.push("no Docker engine answers (DOCKER_HOST or /var/run/docker.sock)".into()),
    }
    match local::start() {
        Ok(backend) => backend,
        Err(e) => {
            tried.push(e);
            stop(&tried)
        }
    }
}

/// A line on the real stderr: the test harness captures `eprintln!` per test, but this concerns
/// the whole run.
fn note(line: &str) {
    let _ = writeln!(std::io::stderr(), "api tests: {line}");
}

/// Ends the whole test process with one message (rather than one failure per test).
fn stop(tried: &[String]) -> ! {
    let mut msg = String::from(
        "api tests: no database to test against.\n\
         Set DATABASE_URL=postgres://USER@HOST:PORT/DB (and REDIS_URL=redis://HOST:PORT) to use running servers,\n\
         or DATABASE_URL=sqlite: to run on embedded SQLite (no Redis),\n\
         or install PostgreSQL (initdb, pg_ctl, postgres) and redis-server so that the tests start their own,\n\
         or start a Docker engine. Tried:\n",
    );
    for t in tried {
        msg.push_str(&format!("  - {t}\n"));
    }
    let _ = std::io::stderr().write_all(msg.as_bytes());
    std::process::exit(2);
}

/// The `max_connections` a PostgreSQL started here allows: each test makes its own database
/// and one or two servers on it, each with a pool of 10 and up to 7 dedicated connections
/// (`BOOKING_CONCURRENCY` + 2), and the harness runs one test per thread.
fn max_connections() -> usize {
    let threads = std::env::var("RUST_TEST_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    (100 + 40 * threads).min(2000)
}

/// A port that was free on 127.0.0.1 a moment ago.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts the process that removes what this test process started once it ends: `cleanup` is
/// a shell script run after the test process has exited.
fn start_watchdog(cleanup: &str) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let script = format!("trap '' INT HUP; cat >/dev/null; {cleanup}");
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: a Ctrl-C of the test run must not stop it before it cleans up.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the clean-up watchdog (sh): {e}"))?;
    // The write end stays open, never written, until this process ends (pipes are opened
    // close-on-exec, so no child inherits it).
    std::mem::forget(child.stdin.take());
    Ok(())
}

/// Quotes one word for `sh`.
fn sh_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Waits until `ready` holds, at most `timeout`.
fn wait_until(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ready()
}

/// Whether a Redis answers `PING` on 127.0.0.1:`port`.
fn redis_answers(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

mod docker {
    //! A Docker engine, if one answers, and the containers started on it.

    use std::{
        io::{Read, Write},
        net::{TcpStream, ToSocketAddrs},
        os::unix::net::UnixStream,
        time::Duration,
    };

    use testcontainers::{
        core::{IntoContainerPort, WaitFor},
        runners::SyncRunner,
        GenericImage, ImageExt,
    };

    use super::{max_connections, sh_quote, start_watchdog, Backend};

    const PING: &[u8] = b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n";

    /// The address of a Docker engine that answers its `/_ping` within a second, if any.
    pub(super) fn engine() -> Option<String> {
        let timeout = Duration::from_secs(1);
        if let Some(host) = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()) {
            let answers = if let Some(path) = host.strip_prefix("unix://") {
                UnixStream::connect(path).ok().is_some_and(|s| pings(s, timeout))
            } else if let Some(addr) = host.strip_prefix("tcp://") {
                let tls = std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty() && v != "0");
                addr.to_socket_addrs().ok().and_then(|mut a| a.next()).is_some_and(|a| {
                    // Over TLS a plain ping cannot be sent: that it accepts connections is enough.
                    TcpStream::connect_timeout(&a, timeout).ok().is_some_and(|s| tls || pings(s, timeout))
                })
            } else {
                false
            };
            return answers.then_some(host);
        }
        let home = std::env::var("HOME").unwrap_or_default();
        let runtime = std::env::var("XDG_RUNTIME_DIR").unwrap_or_default();
        [
            "/var/run/docker.sock".to_owned(),
            format!("{runtime}/.docker/run/docker.sock"),
            format!("{home}/.docker/run/docker.sock"),
            format!("{home}/.docker/desktop/docker.sock"),
        ]
        .into_iter()
        .find(|path| UnixStream::connect(path).ok().is_some_and(|s| pings(s, timeout)))
        .map(|path| format!("unix://{path}"))
    }

    /// Whether an HTTP `/_ping` on `stream` answers 200 within `timeout`.
    fn pings<S: Read + Write + Timeouts>(mut stream: S, timeout: Duration) -> bool {
        stream.timeouts(timeout);
        let mut head = [0u8; 12];
        stream.write_all(PING).is_ok() && stream.read_exact(&mut head).is_ok() && head.ends_with(b" 200")
    }

    trait Timeouts {
        fn timeouts(&self, t: Duration);
    }
    impl Timeouts for UnixStream {
        fn timeouts(&self, t: Duration) {
            let _ = self.set_read_timeout(Some(t));
            let _ = self.set_write_timeout(Some(t));
        }
    }
    impl Timeouts for TcpStream {
        fn timeouts(&self, t: Duration) {
            let _ = self.set_read_timeout(Some(t));
            let _ = self.set_write_timeout(Some(t));
        }
    }

    /// Starts PostgreSQL and Redis containers for the whole test process; the watchdog removes
    /// them (`docker rm -f`) when it ends.
    pub(super) fn start() -> Result<Backend, String> {
        // A thread of its own: the blocking runner must not run inside a test's runtime.
        std::thread::spawn(|| -> Result<Backend, String> {
            let pg = GenericImage::new("postgres", "15-alpine")
                .with_exposed_port(5432.tcp())
                .with_wait_for(WaitFor::message_on_stderr("database system is ready to accept connections"))
                .with_wait_for(WaitFor::message_on_stdout("database system is ready to accept connections"))
                .with_env_var("POSTGRES_PASSWORD", "postgres")
                .with_cmd(["postgres", "-c", "fsync=off", "-c", &format!("max_connections={}", max_connections())])
                .start()
                .map_err(|e| format!("PostgreSQL: {e}"))?;
            let pg_port = pg.get_host_port_ipv4(5432).map_err(|e| e.to_string())?;
            let mut ids = vec![pg.id().to_owned()];
            let redis = GenericImage::new("redis", "7-alpine")
                .with_exposed_port(6379.tcp())
                .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
                .start();
            let redis = match redis {
                Ok(r) => r,
                Err(e) => {
                    drop(pg);
                    return Err(format!("Redis: {e}"));
                }
            };
            let redis_port = redis.get_host_port_ipv4(6379).map_err(|e| e.to_string())?;
            ids.push(redis.id().to_owned());
            let ids: Vec<String> = ids.iter().map(|id| sh_quote(id)).collect();
            start_watchdog(&format!("docker rm -f -v {} >/dev/null 2>&1", ids.join(" ")))?;
            // Dropping them would remove them now; the watchdog does it at the end of the process.
            std::mem::forget(pg);
            std::mem::forget(redis);
            Ok(Backend::Postgres {
                server_url: format!("postgres://postgres:postgres@127.0.0.1:{pg_port}/postgres"),
                redis_url: Some(format!("redis://127.0.0.1:{redis_port}")),
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the container runner panicked".into()))
    }
}

mod local {
    //! A throwaway PostgreSQL and Redis from this machine's binaries.

    use std::{
        path::{Path, PathBuf},
        process::{Command, Output, Stdio},
        time::Duration,
    };

    use super::{
        find_on_path, free_port, max_connections, note, redis_answers, sh_quote, start_watchdog, wait_until, Backend,
    };

    /// How commands run as the database's owner: PostgreSQL refuses to run as root.
    #[derive(Clone)]
    enum RunAs {
        /// This process's user.
        Me,
        /// `runuser -u postgres --`.
        Runuser,
        /// `su postgres -s /bin/sh -c`.
        Su,
    }

    impl RunAs {
        fn detect() -> Result<Self, String> {
            let uid = Command::new("id").arg("-u").output().map_err(|e| format!("cannot run `id -u`: {e}"))?;
            if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
                return Ok(Self::Me);
            }
            if !Command::new("id").arg("postgres").output().is_ok_and(|o| o.status.success()) {
                return Err(
                    "running as root, and PostgreSQL refuses root, but there is no `postgres` user to run it as".into(),
                );
            }
            if find_on_path("runuser").is_some() {
                Ok(Self::Runuser)
            } else if find_on_path("su").is_some() {
                Ok(Self::Su)
            } else {
                Err("running as root, and neither runuser nor su is there to run PostgreSQL as `postgres`".into())
            }
        }

        /// `program args…` as the database's owner.
        fn command(&self, program: &Path, args: &[&str]) -> Command {
            match self {
                Self::Me => {
                    let mut c = Command::new(program);
                    c.args(args);
                    c
                }
                Self::Runuser => {
                    let mut c = Command::new("runuser");
                    c.args(["-u", "postgres", "--"]).arg(program).args(args);
                    c
                }
                Self::Su => {
                    let mut c = Command::new("su");
                    c.args(["postgres", "-s", "/bin/sh", "-c", &line(program, args)]);
                    c
                }
            }
        }

        /// The same as a shell command line.
        fn shell(&self, program: &Path, args: &[&str]) -> String {
            let line = line(program, args);
            match self {
                Self::Me => line,
                Self::Runuser => format!("runuser -u postgres -- {line}"),
                Self::Su => format!("su postgres -s /bin/sh -c {}", sh_quote(&line)),
            }
        }
    }

    /// `program args…` as one shell command line.
    fn line(program: &Path, args: &[&str]) -> String {
        std::iter::once(program.display().to_string())
            .chain(args.iter().map(|a| (*a).to_owned()))
            .map(|w| sh_quote(&w))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The directory that holds `initdb`, `pg_ctl` and `postgres`.
    fn pg_bindir() -> Option<PathBuf> {
        let complete = |dir: &Path| ["initdb", "pg_ctl", "postgres"].iter().all(|b| dir.join(b).is_file());
        let from_pg_config = Command::new("pg_config")
            .arg("--bindir")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
        if let Some(dir) = from_pg_config.filter(|d| complete(d)) {
            return Some(dir);
        }
        // Debian and Ubuntu keep the server binaries off PATH, one directory per major version.
        let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
            .filter(|(_, dir)| complete(dir))
            .collect();
        debian.sort();
        if let Some((_, dir)) = debian.pop() {
            return Some(dir);
        }
        find_on_path("initdb").and_then(|p| p.parent().map(Path::to_path_buf)).filter(|d| complete(d))
    }

    fn run(cmd: &mut Command, what: &str) -> Result<Output, String> {
        let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{what}: {e}"))?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(format!(
                "{what} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Starts PostgreSQL (and Redis, when `redis-server` is there) for this test process.
    pub(super) fn start() -> Result<Backend, String> {
        let Some(bindir) = pg_bindir() else {
            return Err("no PostgreSQL server binaries (initdb, pg_ctl, postgres) in `pg_config --bindir`, \
                        /usr/lib/postgresql/<version>/bin or PATH"
                .into());
        };
        let run_as = RunAs::detect()?;
        let base = tempfile::Builder::new()
            .prefix("clinic-booking-tests-")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary directory: {e}"))?
            .keep();
        let pg_dir = base.join("pg");
        let data = pg_dir.join("data");
        let redis_dir = base.join("redis");
        for dir in [&pg_dir, &redis_dir] {
            std::fs::create_dir(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        }
        let pg_ctl = bindir.join("pg_ctl");
        let data_s = data.display().to_string();
        let redis_pid = redis_dir.join("redis.pid");
        // Before anything starts, so that nothing outlives this process whatever happens next.
        start_watchdog(&format!(
            "{} >/dev/null 2>&1; pid=$(cat {} 2>/dev/null) && kill \"$pid\" 2>/dev/null && \
             for i in $(seq 100); do kill -0 \"$pid\" 2>/dev/null || break; sleep 0.1; done; rm -rf {}",
            run_as.shell(&pg_ctl, &["stop", "-D", &data_s, "-m", "immediate", "-w"]),
            sh_quote(&redis_pid.display().to_string()),
            sh_quote(&base.display().to_string()),
        ))?;
        if !matches!(run_as, RunAs::Me) {
            use std::os::unix::fs::PermissionsExt;
            // The database's owner must reach its directory inside ours.
            std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o711)).map_err(|e| e.to_string())?;
            run(Command::new("chown").args(["postgres:", &pg_dir.display().to_string()]), "chown")?;
        }
        run(
            &mut run_as.command(
                &bindir.join("initdb"),
                &["-D", &data_s, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"],
            ),
            "initdb",
        )?;
        let mut last_error = String::new();
        let mut pg_port = None;
        for _ in 0..3 {
            let port = free_port().map_err(|e| format!("no free port: {e}"))?;
            let settings = format!(
                "\n# clinic-booking tests: a throwaway server.\nlisten_addresses = '127.0.0.1'\nport = {port}\n\
                 unix_socket_directories = '{}'\nmax_connections = {}\nfsync = off\nsynchronous_commit = off\n\
                 full_page_writes = off\n",
                pg_dir.display(),
                max_connections()
            );
            let conf = data.join("postgresql.conf");
            let mut text = std::fs::read_to_string(&conf).map_err(|e| format!("{}: {e}", conf.display()))?;
            text.push_str(&settings);
            std::fs::write(&conf, text).map_err(|e| format!("{}: {e}", conf.display()))?;
            let log = pg_dir.join("log");
            let log_s = log.display().to_string();
            match run(
                &mut run_as.command(&pg_ctl, &["start", "-D", &data_s, "-l", &log_s, "-w", "-t", "60"]),
                "pg_ctl start",
            ) {
                Ok(_) => {
                    pg_port = Some(port);
                    break;
                }
                Err(e) => {
                    let tail = std::fs::read_to_string(&log).unwrap_or_default();
                    let tail: Vec<&str> = tail.lines().rev().take(5).collect();
                    last_error = format!("{e}; log: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" | "));
                }
            }
        }
        let Some(pg_port) = pg_port else {
            return Err(format!("PostgreSQL from {} did not start: {last_error}", bindir.display()));
        };
        let redis_url = match start_redis(&redis_dir, &redis_pid) {
            Ok(port) => Some(format!("redis://127.0.0.1:{port}")),
            Err(e) => {
                note(&format!("{e}: the tests that need Redis skip"));
                None
            }
        };
        note(&format!(
            "no DATABASE_URL: started PostgreSQL ({}) on 127.0.0.1:{pg_port}{} in {}; removed when the tests end",
            bindir.display(),
            redis_url.as_deref().map(|u| format!(" and Redis on {}", &u[8..])).unwrap_or_default(),
            base.display()
        ));
        Ok(Backend::Postgres { server_url: format!("postgres://postgres@127.0.0.1:{pg_port}/postgres"), redis_url })
    }

    /// Starts `redis-server` (no persistence) and returns its port.
    fn start_redis(dir: &Path, pid_file: &Path) -> Result<u16, String> {
        let Some(redis) = find_on_path("redis-server") else {
            return Err("redis-server is not on PATH".into());
        };
        let log = std::fs::File::create(dir.join("log")).map_err(|e| format!("redis log: {e}"))?;
        for _ in 0..3 {
            let port = free_port().map_err(|e| format!("no free port: {e}"))?;
            let (dir_s, port_s) = (dir.display().to_string(), port.to_string());
            let args = ["--port", &port_s, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", &dir_s];
            let mut child = Command::new(&redis)
                .args(args)
                .stdin(Stdio::null())
                .stdout(log.try_clone().map_err(|e| e.to_string())?)
                .stderr(log.try_clone().map_err(|e| e.to_string())?)
                .spawn()
                .map_err(|e| format!("cannot run {}: {e}", redis.display()))?;
            std::fs::write(pid_file, child.id().to_string()).map_err(|e| format!("redis pid file: {e}"))?;
            let exited = |c: &mut std::process::Child| c.try_wait().ok().flatten().is_some();
            wait_until(Duration::from_secs(10), || redis_answers(port) || exited(&mut child));
            if redis_answers(port) {
                // Not waited for: the watchdog stops it.
                return Ok(port);
            }
            if !exited(&mut child) {
                let _ = child.kill();
                return Err(format!("redis-server started but does not answer on 127.0.0.1:{port}"));
            }
            // The port was taken meanwhile: another one.
        }
        Err(format!("redis-server did not start (see {})", dir.join("log").display()))
    }
}

/// The first `name` in `PATH`.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
