//! Loopback ports for the processes tests start (brokers, operators).
//!
//! A test picks a port, releases it and hands it to a child process to
//! bind, so something else may take it in between. Ports therefore come
//! from just below the kernel's ephemeral range (`ip_local_port_range`):
//! a port inside that range is also what the kernel gives the local end of
//! every outgoing connection, and in CI a broker's HTTP listener once lost
//! its port that way ("Address already in use") to a connection another
//! broker of the same test opened. Below the range only an explicit bind
//! takes a port. Each process starts at its own offset (from its pid and
//! the clock) and never hands out a port twice.

use std::collections::BTreeSet;
use std::sync::Mutex;

/// How many ports below the ephemeral range are used.
const SPAN: u32 = 12_000;
/// The lowest port ever used.
const FLOOR: u32 = 10_000;

/// The ports below the ephemeral range `low..` that tests use, or `None`
/// when the range starts too low to leave room.
pub fn candidate_range(ephemeral_low: u32) -> Option<std::ops::Range<u32>> {
    let start = ephemeral_low.saturating_sub(SPAN).max(FLOOR);
    (ephemeral_low >= start + 1_000 && ephemeral_low <= 65_536).then_some(start..ephemeral_low)
}

fn ephemeral_low() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// A free port on 127.0.0.1 that no earlier call of this process returned.
pub fn unused_loopback_port() -> u16 {
    static STATE: Mutex<Option<(BTreeSet<u16>, u32)>> = Mutex::new(None);
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let (given, cursor) = state.get_or_insert_with(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        (
            BTreeSet::new(),
            std::process::id().wrapping_mul(7919) ^ nanos,
        )
    });
    let Some(range) = ephemeral_low().and_then(candidate_range) else {
        return kernel_chosen_port(given);
    };
    let size = range.end - range.start;
    for _ in 0..size {
        *cursor = cursor.wrapping_add(1);
        let port = (range.start + *cursor % size) as u16;
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    kernel_chosen_port(given)
}

/// The fallback: a port the kernel picks from its ephemeral range.
fn kernel_chosen_port(given: &mut BTreeSet<u16>) -> u16 {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind a loopback port")
            .port();
        if given.insert(port) {
            return port;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_the_same_port_twice_and_never_an_ephemeral_one() {
        let ports: Vec<u16> = (0..200).map(|_| unused_loopback_port()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        if let Some(low) = ephemeral_low() {
            if candidate_range(low).is_some() {
                assert!(ports.iter().all(|p| u32::from(*p) < low), "{ports:?}");
            }
        }
    }

    #[test]
    fn the_range_sits_below_the_ephemeral_ports() {
        assert_eq!(candidate_range(32_768), Some(20_768..32_768));
        assert_eq!(candidate_range(15_000), Some(10_000..15_000));
        assert_eq!(candidate_range(10_500), None, "too little room");
        assert_eq!(candidate_range(1_024), None);
    }
}
