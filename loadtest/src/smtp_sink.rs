//! `smtp-sink`: an SMTP server for the delivery benchmarks that accepts every message and keeps
//! none. The tests use aiosmtpd (`tests/servers/smtp_sink.py`); as a benchmark's sink it tops
//! out at ~1,200 messages/s per core on this machine, fewer than the bookings it would have to
//! keep up with, so a run measured the sink. This one speaks the same conversation (RFC 5321:
//! EHLO or HELO, MAIL, RCPT, DATA with dot-stuffing, RSET, NOOP, QUIT), one task per connection.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use anyhow::Context;
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
};

/// Longest command or body line accepted (RFC 5321 allows 1,000 octets with CRLF).
const MAX_LINE: usize = 4096;

/// Settings of `smtp-sink`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct SinkArgs {
    /// The port on 127.0.0.1.
    #[arg(long, default_value_t = 12525)]
    port: u16,
}

/// Runs until killed, printing `RECEIVED n` each second the count changed.
pub(crate) async fn run(args: SinkArgs) -> anyhow::Result<bool> {
    let listener = TcpListener::bind(("127.0.0.1", args.port)).await.context("binding")?;
    println!("LISTENING {}", args.port);
    let count = Arc::new(AtomicU64::new(0));
    tokio::spawn(crate::deliveries::print_count(Arc::clone(&count)));
    loop {
        let (stream, _) = listener.accept().await.context("accepting")?;
        let count = Arc::clone(&count);
        tokio::spawn(async move {
            if let Err(error) = converse(stream, &count).await {
                eprintln!("connection ended: {error:#}");
            }
        });
    }
}

/// One client's conversation, until QUIT or the connection closes.
async fn converse(stream: TcpStream, count: &AtomicU64) -> anyhow::Result<()> {
    stream.set_nodelay(true)?;
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut line = Vec::with_capacity(256);
    write.write_all(b"220 clinic-loadtest smtp-sink ESMTP\r\n").await?;
    let (mut sender, mut recipients) = (false, 0usize);
    loop {
        if !read_line(&mut read, &mut line).await? {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line);
        let verb = text.get(..4).unwrap_or(&text).to_ascii_uppercase();
        let reply: &[u8] = match verb.as_str() {
            "EHLO" => b"250-clinic-loadtest\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n250 SIZE 10485760\r\n",
            "HELO" => b"250 clinic-loadtest\r\n",
            "MAIL" => {
                (sender, recipients) = (true, 0);
                b"250 OK\r\n"
            }
            "RCPT" if sender => {
                recipients += 1;
                b"250 OK\r\n"
            }
            "DATA" if recipients > 0 => {
                write.write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n").await?;
                loop {
                    if !read_line(&mut read, &mut line).await? {
                        return Ok(());
                    }
                    if line == b"." {
                        break;
                    }
                }
                (sender, recipients) = (false, 0);
                count.fetch_add(1, Ordering::Relaxed);
                b"250 OK: discarded\r\n"
            }
            "RCPT" | "DATA" => b"503 Bad sequence of commands\r\n",
            "RSET" => {
                (sender, recipients) = (false, 0);
                b"250 OK\r\n"
            }
            "NOOP" => b"250 OK\r\n",
            "QUIT" => {
                write.write_all(b"221 Bye\r\n").await?;
                return Ok(());
            }
            _ => b"502 Command not implemented\r\n",
        };
        write.write_all(reply).await?;
    }
}

/// Reads one line without its CRLF (or LF) into `line`; false at the end of the stream.
async fn read_line(read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>, line: &mut Vec<u8>) -> anyhow::Result<bool> {
    line.clear();
    let n = (&mut *read).take(MAX_LINE as u64 + 1).read_until(b'\n', line).await?;
    if n == 0 {
        return Ok(false);
    }
    anyhow::ensure!(line.len() <= MAX_LINE, "a line longer than {MAX_LINE} bytes");
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    Ok(true)
}
