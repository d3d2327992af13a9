//! Positioned writes of several buffers as one: `pwritev(2)` until every
//! byte is written.
//!
//! A leader's append writes each batch as its stamped header (base offset,
//! leader epoch, maybe LogAppendTime) followed by the rest of the batch as
//! the producer sent it, straight from the request's buffer: the batch is
//! never copied in user space to change sixteen bytes of it.

use std::fs::File;
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

/// Most buffers handed to one `pwritev` call (Linux's `IOV_MAX`).
const MAX_BUFFERS_PER_CALL: usize = 1024;

/// Writes `pieces` one after the other at `offset` of `file`, all of them,
/// retrying short writes and interruptions. A single piece is a plain
/// positioned write.
pub fn write_all_at(file: &File, pieces: &[&[u8]], offset: u64) -> io::Result<()> {
    if let [only] = pieces {
        return file.write_all_at(only, offset);
    }
    let mut slices: Vec<IoSlice<'_>> = pieces
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| IoSlice::new(p))
        .collect();
    let mut rest: &mut [IoSlice<'_>] = &mut slices;
    let mut at = offset;
    while !rest.is_empty() {
        let count = rest.len().min(MAX_BUFFERS_PER_CALL);
        let position = libc::off_t::try_from(at)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "write offset too large"))?;
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix; the
        // first `count` slices are live borrows for the duration of the
        // call, and the descriptor is open (held by `file`).
        let written = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                rest.as_ptr().cast::<libc::iovec>(),
                count as libc::c_int,
                position,
            )
        };
        if written < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if written == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "pwritev wrote nothing",
            ));
        }
        at += written as u64;
        IoSlice::advance_slices(&mut rest, written as usize);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn contents(file: &mut File) -> Vec<u8> {
        use std::io::Seek;
        let mut out = Vec::new();
        file.rewind().unwrap();
        file.read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn pieces_land_back_to_back_at_the_offset() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all_at(b"0123456789", 0).unwrap();
        write_all_at(&file, &[b"ab", b"", b"cde"], 3).unwrap();
        assert_eq!(contents(&mut file), b"012abcde89");
        write_all_at(&file, &[b"XY"], 10).unwrap();
        assert_eq!(contents(&mut file), b"012abcde89XY");
    }

    #[test]
    fn more_pieces_than_one_call_takes_are_all_written() {
        let mut file = tempfile::tempfile().unwrap();
        let bytes: Vec<[u8; 3]> = (0..(MAX_BUFFERS_PER_CALL * 2 + 7))
            .map(|i| [(i % 251) as u8, (i / 251) as u8, 0xEE])
            .collect();
        let pieces: Vec<&[u8]> = bytes.iter().map(|b| &b[..]).collect();
        write_all_at(&file, &pieces, 5).unwrap();
        let got = contents(&mut file);
        assert_eq!(&got[..5], &[0; 5]);
        assert_eq!(&got[5..], bytes.concat().as_slice());
    }
}
