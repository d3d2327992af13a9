//! Helpers shared by the fuzz checks.

use std::path::PathBuf;

use moldau_broker::storage::batch::{compute_crc, read_offset_and_length, LOG_OVERHEAD};

/// Position of a v2 batch's `crc` field (see `storage::batch`).
const CRC_POS: usize = 17;

/// Rewrites the CRC-32C of every batch in the chain at the start of `buf`
/// (following `batchLength`s until one does not fit), so that mutated
/// batches get past the CRC check to the code behind it. Returns how many
/// bytes the chain covers.
pub fn fix_crcs(buf: &mut [u8]) -> usize {
    let mut pos = 0usize;
    while let Some((_, len)) = read_offset_and_length(&buf[pos..]) {
        let Ok(len) = usize::try_from(len) else { break };
        let Some(end) = pos.checked_add(LOG_OVERHEAD + len) else {
            break;
        };
        let Some(batch) = buf.get_mut(pos..end) else {
            break;
        };
        if batch.len() >= CRC_POS + 4 {
            let crc = compute_crc(batch);
            batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        }
        pos = end;
    }
    pos
}

/// A directory private to this process for targets that need files:
/// `$MOLDAU_FUZZ_TMP`, else `/dev/shm` (tmpfs: no disk I/O per execution),
/// else the system temp dir; then `moldau-fuzz-<name>-<pid>`. Created once.
pub fn scratch_dir(name: &str) -> PathBuf {
    let base = std::env::var_os("MOLDAU_FUZZ_TMP")
        .map(PathBuf::from)
        .or_else(|| {
            let shm = PathBuf::from("/dev/shm");
            shm.is_dir().then_some(shm)
        })
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("moldau-fuzz-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// A cursor over the fuzz input for targets that split it into fields.
pub struct Input<'a> {
    pub rest: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { rest: data }
    }
    pub fn u8(&mut self) -> u8 {
        let (&b, rest) = self.rest.split_first().unwrap_or((&0, &[]));
        self.rest = rest;
        b
    }
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.rest.len());
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        head
    }
    pub fn u16(&mut self) -> u16 {
        let mut b = [0u8; 2];
        let head = self.bytes(2);
        b[..head.len()].copy_from_slice(head);
        u16::from_be_bytes(b)
    }
    pub fn u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        let head = self.bytes(4);
        b[..head.len()].copy_from_slice(head);
        u32::from_be_bytes(b)
    }
    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        let head = self.bytes(8);
        b[..head.len()].copy_from_slice(head);
        u64::from_be_bytes(b)
    }
}
