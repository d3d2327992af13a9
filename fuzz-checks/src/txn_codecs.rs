//! Fuzz check `txn_codecs`: the transaction bytes the broker reads back
//! from disk (issue 37): records of `__transaction_state`, control records
//! (commit and abort markers), `.txnindex` files and producer-state
//! snapshots.
//!
//! Input: a mode byte, then the bytes of that mode:
//! - `0` record: one `__transaction_state` record, `flags u8 | key length
//!   u16 | key | value` (`flags & 1`: a null value, the tombstone), given
//!   to `txn::log_record::decode_key`, `TxnLogValue::decode` and
//!   `decode_record`, and a decoded value to `TransactionMetadata::from_log`
//!   (what the coordinator's load makes of it);
//! - `1` control: one control record, `flags u8 | key length u8 | key |
//!   value` (`flags & 1`: no value), given to
//!   `txn::marker::decode_control_key` and `EndTxnMarker::decode`;
//! - `2` txn index: the bytes of a `.txnindex` file, given to
//!   `storage::txn_index::decode_all` and, written to a scratch partition
//!   directory, to `txn_index::list` / `read` and `append`;
//! - `3` snapshot: `flags u8 | bytes` of a producer-state snapshot (`flags &
//!   1`: its CRC is recomputed first, so mutations reach the fields behind
//!   it), given to `storage::producer_snapshot::decode` and, written under
//!   the name of the offset it claims, to `producer_snapshot::latest`;
//! - `4` log: bytes of a `__transaction_state` segment given to
//!   `txn_coordinator::load::apply_batches`, the batch walk of the
//!   transaction coordinator's load, on the input and on a copy with the
//!   batch CRCs fixed.
//!
//! Asserts: no panic, abort or out-of-memory (a count read from the input
//! must not size an allocation); decode errors are fine. Round trips:
//! a key that decodes re-encodes to the same bytes; a value that decodes
//! re-encodes at its version to bytes that decode to the same value (v0,
//! fixed-width, to the very same bytes; v1 up to the order of unknown
//! tagged fields, which the encoder sorts), and at the other version to the
//! same value less what that version cannot carry; `decode_record` agrees
//! with the key and value decoders; `from_log` keeps the value's fields. A
//! control key that decodes re-encodes to a key of the same type (the same
//! bytes at version 0 without extra bytes); an end marker that decodes
//! re-encodes to a key and value that decode to it, and decodes exactly
//! when its key names COMMIT or ABORT and its value is readable. An index
//! reads back every whole entry up to the first of an unknown version, and
//! those entries encode to the bytes read; the file reader agrees, and
//! reads an entry appended to the file right after them (a torn or unknown
//! tail must not hide it: the partition appends the entries it rebuilds
//! at open). A
//! snapshot that decodes re-encodes to bytes that decode to it (the very
//! same bytes at version 2); `latest` finds exactly what `decode` accepts.
//! The load keeps each id under its own name, and the same bytes in two
//! reads (split after the first batch) load the same state as in one.

use crate::common;

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use moldau_broker::storage::{producer_snapshot, txn_index};
use moldau_broker::txn::log_record::{
    decode_key, decode_record, encode_key, TxnLogEntry, TxnLogValue,
};
use moldau_broker::txn::marker::{
    decode_control_key, encode_control_key, ControlRecordType, EndTxnMarker, CONTROL_KEY_SIZE,
    END_TXN_MARKER_VALUE_SIZE,
};
use moldau_broker::txn::state::TransactionMetadata;
use moldau_broker::txn_coordinator::load::{apply_batches, LoadStats, Loaded};

thread_local! {
    /// The scratch directory of this thread (the bounded run checks inputs
    /// on several threads of one process).
    static DIR: PathBuf = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        common::scratch_dir("txn_codecs").join(format!("t-{n}"))
    };
}

/// A fresh, empty scratch directory.
fn fresh_dir() -> PathBuf {
    let dir = DIR.with(PathBuf::clone);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// `v` with the unknown tagged fields of each section in the order the
/// encoder writes them (by tag; fields of one tag keep their order).
fn tags_sorted(v: &TxnLogValue) -> TxnLogValue {
    let mut v = v.clone();
    v.unknown_tags.sort_by_key(|f| f.tag);
    for e in v.partitions.iter_mut().flatten() {
        e.unknown_tags.sort_by_key(|f| f.tag);
    }
    v
}

/// `v` as version 0 carries it: tagged fields at their defaults.
fn without_tags(v: &TxnLogValue) -> TxnLogValue {
    let defaults = TxnLogValue::default();
    let mut v = v.clone();
    v.previous_producer_id = defaults.previous_producer_id;
    v.next_producer_id = defaults.next_producer_id;
    v.next_producer_epoch = defaults.next_producer_epoch;
    v.client_transaction_version = defaults.client_transaction_version;
    v.unknown_tags.clear();
    for e in v.partitions.iter_mut().flatten() {
        e.unknown_tags.clear();
    }
    v
}

fn value_round_trip(bytes: &[u8], v: &TxnLogValue) {
    let version = i16::from_be_bytes([bytes[0], bytes[1]]);
    let again = v
        .encode(version)
        .expect("a decoded value encodes at its version");
    let back = TxnLogValue::decode(&again).expect("a re-encoded value decodes");
    assert_eq!(back, tags_sorted(v), "value round trip at v{version}");
    if version == 0 {
        assert_eq!(again, bytes, "a v0 value re-encodes to the same bytes");
        let v1 = v.encode(1).expect("a v0 value encodes at v1");
        assert_eq!(
            TxnLogValue::decode(&v1).as_ref(),
            Ok(v),
            "v0 value through v1"
        );
    } else {
        assert_eq!(
            back.encode(version).as_ref(),
            Ok(&again),
            "encoding is stable"
        );
        // v0 refuses only topic names too long for an int16 length.
        if let Ok(v0) = v.encode(0) {
            assert_eq!(
                TxnLogValue::decode(&v0),
                Ok(without_tags(v)),
                "v1 value through v0"
            );
        }
    }
}

fn metadata_keeps_the_value(id: &str, v: &TxnLogValue) {
    let Ok(meta) = TransactionMetadata::from_log(id, v) else {
        return;
    };
    assert_eq!(meta.transactional_id(), id);
    assert_eq!(meta.producer_id(), v.producer_id);
    assert_eq!(meta.prev_producer_id(), v.previous_producer_id);
    assert_eq!(meta.next_producer_id(), v.next_producer_id);
    assert_eq!(meta.producer_epoch(), v.producer_epoch);
    assert_eq!(meta.timeout_ms(), v.timeout_ms);
    assert_eq!(meta.state().id(), v.status);
    assert_eq!(meta.start_ms(), v.start_ms);
    assert_eq!(meta.last_update_ms(), v.last_update_ms);
    assert_eq!(
        meta.client_tv().feature_level(),
        v.client_transaction_version
    );
    for tp in meta.partitions() {
        assert!(
            v.topic_partitions().contains(tp),
            "a loaded partition comes from the value"
        );
    }
}

fn record(data: &[u8]) {
    let mut input = common::Input::new(data);
    let flags = input.u8();
    let key_len = usize::from(input.u16());
    let key = input.bytes(key_len);
    let value = (flags & 1 == 0).then_some(input.rest);

    let id = decode_key(key);
    if let Ok(id) = &id {
        assert_eq!(
            encode_key(id).as_deref(),
            Ok(key),
            "a key re-encodes to its bytes"
        );
    }
    let decoded = value.map(TxnLogValue::decode);
    if let (Some(bytes), Some(Ok(v))) = (value, &decoded) {
        value_round_trip(bytes, v);
        if let Ok(id) = &id {
            metadata_keeps_the_value(id, v);
        }
    }
    let entry = decode_record(key, value);
    match (&id, decoded, &entry) {
        (Err(e), _, Err(f)) => assert_eq!(e, f, "decode_record fails as the key does"),
        (Ok(_), Some(Err(e)), Err(f)) => assert_eq!(&e, f, "decode_record fails as the value"),
        (Ok(id), None, Ok(TxnLogEntry::Tombstone { transactional_id })) => {
            assert_eq!(id, transactional_id)
        }
        (
            Ok(id),
            Some(Ok(v)),
            Ok(TxnLogEntry::Value {
                transactional_id,
                value,
            }),
        ) => {
            assert_eq!(id, transactional_id);
            assert_eq!(&v, value);
        }
        (id, decoded, entry) => {
            panic!("decode_record {entry:?} disagrees with key {id:?} and value {decoded:?}")
        }
    }
}

fn control(data: &[u8]) {
    let mut input = common::Input::new(data);
    let flags = input.u8();
    let key_len = usize::from(input.u8());
    let key = input.bytes(key_len);
    let value = (flags & 1 == 0).then_some(input.rest);

    let kind = decode_control_key(key).ok();
    if let Some(kind) = kind {
        let again = encode_control_key(kind);
        assert_eq!(
            decode_control_key(&again),
            Ok(kind),
            "control key round trip"
        );
        assert_eq!(ControlRecordType::from_type_id(kind.type_id()), kind);
        if key.len() == CONTROL_KEY_SIZE && key[..2] == [0, 0] {
            assert_eq!(again, key, "a v0 control key re-encodes to its bytes");
        }
    }
    let marker = EndTxnMarker::decode(key, value);
    // A marker decodes exactly when its key names COMMIT or ABORT and its
    // value has a non-negative version and the fields of version 0.
    let readable = |v: &[u8]| v.len() >= END_TXN_MARKER_VALUE_SIZE && v[0] & 0x80 == 0;
    let expected = kind
        .and_then(|k| k.txn_result())
        .is_some_and(|_| value.is_some_and(readable));
    assert_eq!(marker.is_ok(), expected, "marker {marker:?} from {key:?}");
    if let Ok(m) = marker {
        assert_eq!(kind.and_then(|k| k.txn_result()), Some(m.result));
        let v = value.expect("a decoded marker has a value");
        assert_eq!(
            m.coordinator_epoch,
            i32::from_be_bytes([v[2], v[3], v[4], v[5]])
        );
        assert_eq!(
            EndTxnMarker::decode(&m.key(), Some(&m.value())),
            Ok(m),
            "marker round trip"
        );
    }
}

fn txn_index_file(data: &[u8]) {
    let entries = txn_index::decode_all(data);
    let whole = data.len() / txn_index::ENTRY_LEN;
    assert!(entries.len() <= whole);
    let encoded: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
    assert_eq!(
        encoded,
        data[..entries.len() * txn_index::ENTRY_LEN],
        "entries encode to the bytes they were read from"
    );
    if entries.len() < whole {
        let at = entries.len() * txn_index::ENTRY_LEN;
        assert_ne!(
            i16::from_be_bytes([data[at], data[at + 1]]),
            txn_index::VERSION,
            "the reader stops only at an entry of an unknown version"
        );
    }

    let dir = fresh_dir();
    let base = 0;
    fs::write(dir.join(txn_index::file_name(base)), data).expect("write the index");
    assert_eq!(txn_index::list(&dir).expect("list"), vec![base]);
    assert_eq!(txn_index::read(&dir, base).expect("read"), entries);
    assert_eq!(txn_index::read(&dir, 1).expect("read"), vec![]);
    // An entry appended (an ABORT marker found at open that the file does
    // not list) is read back after what was readable, whatever followed.
    let entry = txn_index::AbortedTxn {
        producer_id: 7,
        first_offset: 3,
        last_offset: 9,
        last_stable_offset: 10,
    };
    txn_index::append(&dir, base, &entry).expect("append");
    let mut expected = entries;
    expected.push(entry);
    assert_eq!(
        txn_index::read(&dir, base).expect("read"),
        expected,
        "an appended entry is read back"
    );
}

fn snapshot(data: &[u8]) {
    let mut input = common::Input::new(data);
    let flags = input.u8();
    let mut bytes = input.rest.to_vec();
    if flags & 1 != 0 && bytes.len() >= 10 {
        let crc = crc32c(&bytes[10..]);
        bytes[6..10].copy_from_slice(&crc.to_be_bytes());
    }
    let decoded = producer_snapshot::decode(&bytes);
    if let Ok((offset, entries)) = &decoded {
        let again = producer_snapshot::encode(*offset, entries);
        assert_eq!(
            producer_snapshot::decode(&again).as_ref(),
            Ok(&(*offset, entries.clone())),
            "snapshot round trip"
        );
        if bytes[4..6] == [0, 2] {
            assert_eq!(again, bytes, "a v2 snapshot re-encodes to its bytes");
        }
    }

    // The file under the name of the offset it claims (any offset a file
    // name can hold), found by `latest` exactly when it decodes.
    let claimed = bytes
        .get(10..18)
        .map(|b| i64::from_be_bytes(b.try_into().expect("8 bytes")))
        .filter(|&o| o >= 0)
        .unwrap_or(0);
    let dir = fresh_dir();
    fs::write(dir.join(producer_snapshot::file_name(claimed)), &bytes).expect("write");
    let found = producer_snapshot::latest(&dir, 0, i64::MAX).expect("latest");
    match decoded {
        Ok((offset, entries)) if offset == claimed => {
            assert_eq!(found, Some((offset, entries)))
        }
        _ => assert_eq!(found, None, "latest takes an unusable snapshot"),
    }
}

/// CRC-32C (Castagnoli), as the snapshot format uses (bitwise: inputs are
/// small).
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0x82f6_3b78 & 0u32.wrapping_sub(crc & 1));
        }
    }
    !crc
}

/// The batch walk of the transaction coordinator's load (the very function
/// it calls), as one pass and as two passes split after the first batch.
fn load(bytes: &[u8]) {
    let mut state = Loaded::default();
    let mut stats = LoadStats::default();
    let Ok(next) = apply_batches(bytes, 0, &mut state, &mut stats, 0) else {
        return;
    };
    for (id, meta) in &state {
        assert_eq!(meta.transactional_id(), id, "an id is kept under its name");
    }
    // The same bytes in two reads, split after the first batch, as the
    // coordinator's reads of a partition may split them.
    let first = moldau_broker::storage::batch::BatchHeader::parse(bytes)
        .ok()
        .map(|h| h.total_size())
        .filter(|&n| n < bytes.len());
    if let Some(split) = first {
        let mut two = Loaded::default();
        let mut two_stats = LoadStats::default();
        let Ok(mid) = apply_batches(&bytes[..split], 0, &mut two, &mut two_stats, 0) else {
            return;
        };
        if let Ok(end) = apply_batches(&bytes[split..], mid, &mut two, &mut two_stats, 0) {
            assert_eq!(end, next, "two reads end where one does");
            assert_eq!(two, state, "two reads load what one does");
            assert_eq!(two_stats, stats);
        }
    }
}

/// One input through the check (see the module doc).
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 5 {
        0 => record(rest),
        1 => control(rest),
        2 => txn_index_file(rest),
        3 => snapshot(rest),
        _ => {
            load(rest);
            let mut fixed = rest.to_vec();
            common::fix_crcs(&mut fixed);
            if fixed != rest {
                load(&fixed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_is_castagnoli() {
        // the check value of CRC-32C
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }
}
