//! The out-of-band TCP channel of `rnic perf --dev` and `rnic pingpong`:
//! the server listens (perftest's and the pingpong examples' port 18515
//! by default), the client connects — retrying while the server is not
//! listening yet, for a few seconds — and both then exchange what their
//! QPs need: fixed-size records in both cases (perftest's for `rnic perf`,
//! see `perf::dev::exchange`; the pingpong examples' for `rnic pingpong`),
//! and text lines between two `rnic perf` sides.

use crate::CliError;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long a client keeps trying to reach a server that refuses.
pub const CONNECT_PATIENCE: Duration = Duration::from_secs(10);
/// How long a blocking read waits for the peer.
pub const READ_PATIENCE: Duration = Duration::from_secs(60);

/// One TCP connection, with a line buffer.
pub struct Ctrl {
    stream: TcpStream,
    buf: Vec<u8>,
    /// The peer's address (IPv4 rather than IPv4-mapped IPv6).
    pub peer: IpAddr,
    nonblocking: bool,
}

fn io_err(what: &str, e: std::io::Error) -> CliError {
    CliError::new(format!("{what}: {e}"))
}

/// Listens on every address of `port` (IPv6 and IPv4 when the system
/// allows both on one socket, else IPv4).
pub fn listen(port: u16) -> Result<TcpListener, CliError> {
    TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| io_err(&format!("cannot listen on TCP port {port}"), e))
}

/// The first address of `host` (a name or an address), as a client
/// connecting to it on `port` would use.
pub fn resolve(host: &str, port: u16) -> Result<IpAddr, CliError> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| CliError::new(format!("{host}: {e}")))?
        .next()
        .map(|a| a.ip())
        .ok_or_else(|| CliError::new(format!("{host}: no address")))
}

impl Ctrl {
    fn new(stream: TcpStream) -> Result<Ctrl, CliError> {
        let peer = stream
            .peer_addr()
            .map_err(|e| io_err("the peer's address", e))?
            .ip()
            .to_canonical();
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(READ_PATIENCE))
            .map_err(|e| io_err("socket option", e))?;
        Ok(Ctrl {
            stream,
            buf: Vec::new(),
            peer,
            nonblocking: false,
        })
    }

    /// Waits for one client.
    pub fn accept(l: &TcpListener) -> Result<Ctrl, CliError> {
        let (s, _) = l.accept().map_err(|e| io_err("accept", e))?;
        Ctrl::new(s)
    }

    /// Connects to `host:port`, retrying refused connections for
    /// [`CONNECT_PATIENCE`].
    pub fn connect(host: &str, port: u16) -> Result<Ctrl, CliError> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|e| CliError::new(format!("{host}: {e}")))?
            .collect();
        let t0 = Instant::now();
        loop {
            let mut last = None;
            for a in &addrs {
                match TcpStream::connect_timeout(a, Duration::from_secs(5)) {
                    Ok(s) => return Ctrl::new(s),
                    Err(e) => last = Some(e),
                }
            }
            let e = last.unwrap_or_else(|| std::io::Error::other("no address"));
            let retry = matches!(
                e.kind(),
                ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset
            );
            if !retry || t0.elapsed() > CONNECT_PATIENCE {
                return Err(CliError::new(format!(
                    "couldn't connect to {host}:{port}: {e} (is the server running?)"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn set_nonblocking(&mut self, nb: bool) -> Result<(), CliError> {
        if self.nonblocking != nb {
            self.stream
                .set_nonblocking(nb)
                .map_err(|e| io_err("socket option", e))?;
            self.nonblocking = nb;
        }
        Ok(())
    }

    pub fn write_all(&mut self, b: &[u8]) -> Result<(), CliError> {
        self.set_nonblocking(false)?;
        self.stream
            .write_all(b)
            .map_err(|e| io_err("sending to the peer", e))
    }

    /// Reads exactly `n` bytes (the pingpong examples' fixed records).
    pub fn read_exact(&mut self, n: usize) -> Result<Vec<u8>, CliError> {
        self.set_nonblocking(false)?;
        let mut out: Vec<u8> = self.buf.drain(..self.buf.len().min(n)).collect();
        let start = out.len();
        out.resize(n, 0);
        self.stream
            .read_exact(&mut out[start..])
            .map_err(|e| match e.kind() {
                ErrorKind::UnexpectedEof => CliError::new(format!(
                    "the peer closed the connection after {start} of {n} bytes"
                )),
                _ => io_err("reading from the peer", e),
            })?;
        Ok(out)
    }

    /// Reads what is there (at most `max` bytes), waiting for at least one.
    pub fn read_some(&mut self, max: usize) -> Result<Vec<u8>, CliError> {
        if !self.buf.is_empty() {
            let n = self.buf.len().min(max);
            return Ok(self.buf.drain(..n).collect());
        }
        self.set_nonblocking(false)?;
        let mut b = vec![0u8; max];
        let n = self
            .stream
            .read(&mut b)
            .map_err(|e| io_err("reading from the peer", e))?;
        b.truncate(n);
        Ok(b)
    }

    pub fn send_line(&mut self, line: &str) -> Result<(), CliError> {
        debug_assert!(!line.contains('\n'));
        let mut b = Vec::with_capacity(line.len() + 1);
        b.extend_from_slice(line.as_bytes());
        b.push(b'\n');
        self.write_all(&b)
    }

    fn take_line(&mut self) -> Option<String> {
        let i = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=i).collect();
        Some(String::from_utf8_lossy(&line[..i]).trim_end().to_string())
    }

    fn fill(&mut self) -> Result<usize, std::io::Error> {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// The next line (blocking, up to [`READ_PATIENCE`]).
    pub fn recv_line(&mut self) -> Result<String, CliError> {
        loop {
            if let Some(l) = self.take_line() {
                return Ok(l);
            }
            self.set_nonblocking(false)?;
            match self.fill() {
                Ok(0) => return Err(CliError::new("the peer closed the connection")),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("reading from the peer", e)),
            }
        }
    }

    /// The next line, calling `idle` while none has arrived (to keep an
    /// inline engine turning); gives up after [`READ_PATIENCE`].
    pub fn recv_line_while(&mut self, mut idle: impl FnMut(u64)) -> Result<String, CliError> {
        let t0 = Instant::now();
        let mut n = 0u64;
        loop {
            if n.is_multiple_of(64) {
                if let Some(l) = self.try_line()? {
                    return Ok(l);
                }
                if t0.elapsed() > READ_PATIENCE {
                    return Err(CliError::new(format!(
                        "the peer said nothing for {} s",
                        READ_PATIENCE.as_secs()
                    )));
                }
            }
            idle(n);
            n += 1;
        }
    }

    /// Reads exactly `n` bytes (perftest's fixed-size messages), calling
    /// `idle` between non-blocking attempts (to keep an inline engine
    /// turning); gives up after `patience`, or with `None` waits as long as
    /// the peer keeps the connection open.
    pub fn read_exact_while(
        &mut self,
        n: usize,
        patience: Option<Duration>,
        idle: &mut dyn FnMut(u64),
    ) -> Result<Vec<u8>, CliError> {
        let t0 = Instant::now();
        let mut k = 0u64;
        loop {
            if self.buf.len() >= n {
                return Ok(self.buf.drain(..n).collect());
            }
            if k.is_multiple_of(64) {
                self.set_nonblocking(true)?;
                match self.fill() {
                    Ok(0) => {
                        return Err(CliError::new(format!(
                            "the peer closed the connection after {} of {n} bytes",
                            self.buf.len()
                        )))
                    }
                    Ok(_) => continue,
                    Err(e)
                        if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                    Err(e) => return Err(io_err("reading from the peer", e)),
                }
                if let Some(p) = patience {
                    if t0.elapsed() > p {
                        return Err(CliError::new(format!(
                            "the peer sent {} of {n} bytes in {} s",
                            self.buf.len(),
                            p.as_secs()
                        )));
                    }
                }
            }
            idle(k);
            k += 1;
        }
    }

    /// The next line if one has arrived (never blocks).
    pub fn try_line(&mut self) -> Result<Option<String>, CliError> {
        if let Some(l) = self.take_line() {
            return Ok(Some(l));
        }
        self.set_nonblocking(true)?;
        match self.fill() {
            Ok(0) => Err(CliError::new("the peer closed the connection")),
            Ok(_) => Ok(self.take_line()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                Ok(None)
            }
            Err(e) => Err(io_err("reading from the peer", e)),
        }
    }
}
