//! A container's health check, made by the binary itself.

use std::io::Write;

/// A container's health check: asks this host's `port` for `path` over
/// HTTP/1.0 and succeeds on a 200. Plain std, so an image needs no curl.
pub fn check_health(port: u16, path: &str) -> Result<(), String> {
    use std::io::Read;
    use std::net::{Ipv4Addr, SocketAddr, TcpStream};
    use std::time::Duration;
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let timeout = Duration::from_secs(5);
    let mut stream = TcpStream::connect_timeout(&address, timeout).map_err(|e| format!("{address}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").map_err(|e| format!("{address}: {e}"))?;
    let mut head = [0u8; 64];
    let read = stream.read(&mut head).map_err(|e| format!("{address}: {e}"))?;
    let status_line = String::from_utf8_lossy(&head[..read]);
    let status = status_line.split_whitespace().nth(1).unwrap_or("none");
    if status == "200" { Ok(()) } else { Err(format!("GET {path} on {address} answered {status}")) }
}
