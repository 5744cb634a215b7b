//! A lingering close (RFC 9112 §9.6): a connection the server ends is half-closed, and what the
//! client still sends is read and dropped, up to a bound, before the socket is closed.
//!
//! Why: a server that closes a socket with unread data in its receive buffer (a body it refused
//! with `413`, say, which the client keeps sending) makes the kernel answer with a reset, and a
//! reset makes the client's kernel drop what it had received but not yet handed over: the
//! client never reads the `413`, it sees `ECONNRESET`. hyper writes the answer and shuts its
//! side down, then drops the stream, which closes it at once; [`Lingering`] takes over there.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::{TcpListener, TcpStream},
};

/// Most bytes read and dropped after the server ended a connection: a client that sent a body
/// several times the limit gets its answer; one that sends more is cut off with a reset.
const LINGER_BYTES: usize = 4 * 1024 * 1024;
/// Longest wait for the client to close its side (a client usually closes once it has read the
/// answer and the end of the connection, within a round trip).
const LINGER_FOR: Duration = Duration::from_secs(5);

/// The service's listener: axum's accept loop over TCP, each connection a [`Lingering`].
pub(super) struct LingeringListener(pub(super) TcpListener);

impl axum::serve::Listener for LingeringListener {
    type Io = Lingering;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.0).await;
        (Lingering(Some(stream)), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A TCP connection that, when dropped, closes lingering (see the module's documentation).
/// The stream is `None` only once dropped.
pub(super) struct Lingering(Option<TcpStream>);

impl Lingering {
    fn stream(&mut self) -> io::Result<&mut TcpStream> {
        self.0.as_mut().ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }
}

impl AsyncRead for Lingering {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(stream) => Pin::new(stream).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(stream) => Pin::new(stream).poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.0.as_ref().is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(stream) => Pin::new(stream).poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(stream) => Pin::new(stream).poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(stream) = self.0.take() else { return };
        // The usual end: the client closed first (hyper read its end), and nothing is left.
        let mut probe = [0u8; 1];
        if matches!(stream.try_read(&mut probe), Ok(0)) {
            return;
        }
        // Without a runtime (it is shutting down) the socket just closes.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(linger(stream));
        }
    }
}

/// Half-closes `stream` (the client reads the answer, then the end), then reads and drops what
/// the client still sends until it closes too, [`LINGER_BYTES`] or [`LINGER_FOR`].
async fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let mut buf = vec![0u8; 64 * 1024];
    let mut left = LINGER_BYTES;
    let drain = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) if n >= left => break,
                Ok(n) => left -= n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_FOR, drain).await;
}
