//! A consumer group's records in `__consumer_offsets`, in Kafka's own
//! schemas (the key's version is the record type; values are flexible
//! version 0): ConsumerGroupMetadata (3, the group epoch),
//! ConsumerGroupPartitionMetadata (4, the subscribed topics' metadata;
//! read, no longer written),
//! ConsumerGroupMemberMetadata (5, with a classic member's
//! `ClassicMemberMetadata` as its tagged field 0), ConsumerGroupTargetAssignmentMetadata
//! (6, the assignment epoch), ConsumerGroupTargetAssignmentMember (7) and
//! ConsumerGroupCurrentMemberAssignment (8). Tombstones delete.
//!
//! [`diff`] turns a state change into the records that describe it, in
//! Kafka's order (a removed member's records first, the group's epoch
//! before the target, the target before the current assignments);
//! [`Replay`] rebuilds the groups from them when a shard loads. As Kafka
//! 4.1+ (KIP-1101), the group record carries the hash of the subscribed
//! topics' metadata (tagged field 0, `MetadataHash`, left out when 0) and
//! record 4 is no longer written: one found in the log (written by an
//! earlier Moldau) is read, gives the group its hash if the group record
//! had none, and is deleted by the group's next write.
//!
//! Pure encoding and decoding; every length read is bounded by the bytes
//! present.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

use super::assignor::Assignment;
use super::machine::{ConsumerGroup, Member, TopicMeta};
use super::metadata_hash;
use super::migration::ClassicMetadata;
use super::reconcile::{CurrentAssignment, MemberState};

pub const GROUP_METADATA: i16 = 3;
pub const PARTITION_METADATA: i16 = 4;
pub const MEMBER_METADATA: i16 = 5;
pub const TARGET_METADATA: i16 = 6;
pub const TARGET_MEMBER: i16 = 7;
pub const CURRENT_ASSIGNMENT: i16 = 8;

/// A record: key and value (`None`: a tombstone).
pub type RecordKv = (Bytes, Option<Bytes>);

/// Whether `key` is one of a consumer group's records (by its version).
pub fn is_consumer_key(key: &[u8]) -> bool {
    key.len() >= 2
        && (GROUP_METADATA..=CURRENT_ASSIGNMENT).contains(&i16::from_be_bytes([key[0], key[1]]))
}

fn key(version: i16, group: &str, member: Option<&str>) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(version);
    for s in std::iter::once(group).chain(member) {
        b.put_i16(s.len() as i16);
        b.put_slice(s.as_bytes());
    }
    b.freeze()
}

// ---- flexible-version encoding -------------------------------------------

fn uvarint(b: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn compact_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        None => uvarint(b, 0),
        Some(s) => {
            uvarint(b, s.len() as u32 + 1);
            b.put_slice(s.as_bytes());
        }
    }
}

fn no_tags(b: &mut BytesMut) {
    uvarint(b, 0);
}

fn partitions(b: &mut BytesMut, a: &Assignment) {
    uvarint(b, a.len() as u32 + 1);
    for (t, ps) in a {
        b.put_slice(t.as_bytes());
        uvarint(b, ps.len() as u32 + 1);
        for p in ps {
            b.put_i32(*p);
        }
        no_tags(b);
    }
}

fn value(f: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    f(&mut b);
    no_tags(&mut b);
    b.freeze()
}

struct Reader(Bytes);

impl Reader {
    fn u8(&mut self) -> Option<u8> {
        (self.0.remaining() >= 1).then(|| self.0.get_u8())
    }
    fn i16(&mut self) -> Option<i16> {
        (self.0.remaining() >= 2).then(|| self.0.get_i16())
    }
    fn i32(&mut self) -> Option<i32> {
        (self.0.remaining() >= 4).then(|| self.0.get_i32())
    }
    fn uvarint(&mut self) -> Option<u32> {
        let mut v: u32 = 0;
        for shift in (0..35).step_by(7) {
            let byte = self.u8()?;
            v |= u32::from(byte & 0x7f).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    fn take(&mut self, n: usize) -> Option<Bytes> {
        (self.0.remaining() >= n).then(|| self.0.split_to(n))
    }
    fn string(&mut self) -> Option<String> {
        let n = usize::try_from(self.i16()?).ok()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
    fn compact_str(&mut self) -> Option<Option<String>> {
        match self.uvarint()? {
            0 => Some(None),
            n => String::from_utf8(self.take(n as usize - 1)?.to_vec())
                .ok()
                .map(Some),
        }
    }
    /// A compact array's length, bounded by the bytes left (each element
    /// takes at least `min` bytes).
    fn array_len(&mut self, min: usize) -> Option<usize> {
        let n = (self.uvarint()? as usize).checked_sub(1)?;
        (n.saturating_mul(min) <= self.0.remaining()).then_some(n)
    }
    fn uuid(&mut self) -> Option<Uuid> {
        Uuid::from_slice(&self.take(16)?).ok()
    }
    /// Skips a tagged-field section.
    fn tags(&mut self) -> Option<()> {
        for _ in 0..self.uvarint()? {
            let _tag = self.uvarint()?;
            let len = self.uvarint()? as usize;
            self.take(len)?;
        }
        Some(())
    }
    fn partitions(&mut self) -> Option<Assignment> {
        let mut a = Assignment::new();
        for _ in 0..self.array_len(18)? {
            let t = self.uuid()?;
            let mut ps = BTreeSet::new();
            for _ in 0..self.array_len(4)? {
                ps.insert(self.i32()?);
            }
            self.tags()?;
            a.insert(t, ps);
        }
        Some(a)
    }
    /// The tagged fields: tag `wanted`'s value as an int64 (`None` inside
    /// when absent), the others skipped.
    fn tagged_i64(&mut self, wanted: u32) -> Option<Option<i64>> {
        let mut found = None;
        for _ in 0..self.uvarint()? {
            let tag = self.uvarint()?;
            let len = self.uvarint()? as usize;
            let mut field = self.take(len)?;
            if tag == wanted && len == 8 {
                found = Some(field.get_i64());
            }
        }
        Some(found)
    }
    fn version0(&mut self) -> Option<()> {
        (self.i16()? == 0).then_some(())
    }
}

// ---- the records ----------------------------------------------------------

/// ConsumerGroupMetadataValue: the epoch, and the metadata hash as tagged
/// field 0 (left out when 0, its default).
fn group_record(id: &str, epoch: i32, metadata_hash: i64) -> RecordKv {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(epoch);
    if metadata_hash == 0 {
        no_tags(&mut b);
    } else {
        uvarint(&mut b, 1);
        uvarint(&mut b, 0);
        uvarint(&mut b, 8);
        b.put_i64(metadata_hash);
    }
    (key(GROUP_METADATA, id, None), Some(b.freeze()))
}

/// ConsumerGroupMemberMetadataValue; a member of the classic protocol
/// carries its `ClassicMemberMetadata` as tagged field 0 (a nullable
/// struct: a presence byte, then the struct).
fn member_metadata(id: &str, m: &Member) -> RecordKv {
    let mut b = BytesMut::new();
    b.put_i16(0);
    compact_str(&mut b, m.instance_id.as_deref());
    compact_str(&mut b, m.rack_id.as_deref());
    compact_str(&mut b, Some(&m.client_id));
    compact_str(&mut b, Some(&m.client_host));
    uvarint(&mut b, m.subscribed_names.len() as u32 + 1);
    for n in &m.subscribed_names {
        compact_str(&mut b, Some(n));
    }
    compact_str(&mut b, m.regex.as_deref());
    b.put_i32(m.rebalance_timeout_ms);
    compact_str(&mut b, m.server_assignor.as_deref());
    match &m.classic {
        None => no_tags(&mut b),
        Some(c) => {
            let mut field = BytesMut::new();
            uvarint(&mut field, 1);
            field.put_i32(c.session_timeout_ms);
            uvarint(&mut field, c.protocols.len() as u32 + 1);
            for (name, metadata) in &c.protocols {
                compact_str(&mut field, Some(name));
                uvarint(&mut field, metadata.len() as u32 + 1);
                field.put_slice(metadata);
                no_tags(&mut field);
            }
            no_tags(&mut field);
            uvarint(&mut b, 1);
            uvarint(&mut b, 0);
            uvarint(&mut b, field.len() as u32);
            b.put_slice(&field);
        }
    }
    (key(MEMBER_METADATA, id, Some(&m.id)), Some(b.freeze()))
}

fn target_epoch(id: &str, epoch: i32) -> RecordKv {
    let v = value(|b| b.put_i32(epoch));
    (key(TARGET_METADATA, id, None), Some(v))
}

fn target_member(id: &str, member: &str, a: &Assignment) -> RecordKv {
    let v = value(|b| partitions(b, a));
    (key(TARGET_MEMBER, id, Some(member)), Some(v))
}

fn current_assignment(id: &str, member: &str, c: &CurrentAssignment) -> RecordKv {
    let v = value(|b| {
        b.put_i32(c.epoch);
        b.put_i32(c.previous_epoch);
        b.put_i8(c.state.code());
        partitions(b, &c.assigned);
        partitions(b, &c.revoking);
    });
    (key(CURRENT_ASSIGNMENT, id, Some(member)), Some(v))
}

/// The records that take the stored state of a group from `old` to `new`
/// (`None`: no group; both `None` or equal: nothing).
pub fn diff(id: &str, old: Option<&ConsumerGroup>, new: Option<&ConsumerGroup>) -> Vec<RecordKv> {
    let empty = ConsumerGroup::new(id);
    let o = old.unwrap_or(&empty);
    let n = new.unwrap_or(&empty);
    let mut out = Vec::new();
    // members gone: current assignment, target, metadata
    for m in o.members.keys().filter(|m| !n.members.contains_key(*m)) {
        out.push((key(CURRENT_ASSIGNMENT, id, Some(m)), None));
        out.push((key(TARGET_MEMBER, id, Some(m)), None));
        out.push((key(MEMBER_METADATA, id, Some(m)), None));
    }
    for (mid, m) in &n.members {
        if o.members.get(mid).is_none_or(|prev| !prev.same_metadata(m)) {
            out.push(member_metadata(id, m));
        }
    }
    if o.legacy_partition_metadata && new.is_some() && !n.legacy_partition_metadata {
        out.push((key(PARTITION_METADATA, id, None), None));
    }
    if new.is_some() && (old.is_none() || (o.epoch, o.metadata_hash) != (n.epoch, n.metadata_hash))
    {
        out.push(group_record(id, n.epoch, n.metadata_hash));
    }
    for (mid, a) in &n.target {
        if o.target.get(mid) != Some(a) {
            out.push(target_member(id, mid, a));
        }
    }
    for mid in o.target.keys() {
        if !n.target.contains_key(mid) && n.members.contains_key(mid) {
            out.push((key(TARGET_MEMBER, id, Some(mid)), None));
        }
    }
    if new.is_some() && (old.is_none() || o.assignment_epoch != n.assignment_epoch) {
        out.push(target_epoch(id, n.assignment_epoch));
    }
    for (mid, m) in &n.members {
        if o.members
            .get(mid)
            .is_none_or(|prev| prev.current != m.current)
        {
            out.push(current_assignment(id, mid, &m.current));
        }
    }
    if new.is_none() && old.is_some() {
        out.push((key(TARGET_METADATA, id, None), None));
        if o.legacy_partition_metadata {
            out.push((key(PARTITION_METADATA, id, None), None));
        }
        out.push((key(GROUP_METADATA, id, None), None));
    }
    out
}

/// Consumer groups rebuilt from their records, in log order.
#[derive(Debug, Default, Clone)]
pub struct Replay {
    groups: BTreeMap<String, ReplayGroup>,
}

#[derive(Debug, Default, Clone)]
struct ReplayGroup {
    /// Whether the group record was seen (and not deleted).
    exists: bool,
    group: ConsumerGroup,
    metadata: BTreeMap<String, Member>,
    current: BTreeMap<String, CurrentAssignment>,
}

impl Replay {
    /// Applies one record whose key is a consumer group's
    /// ([`is_consumer_key`]); undecodable ones are ignored.
    pub fn apply(&mut self, key_bytes: Bytes, value: Option<Bytes>) {
        let mut k = Reader(key_bytes);
        let Some(version) = k.i16() else { return };
        let Some(group_id) = k.string() else { return };
        let member = match version {
            MEMBER_METADATA | TARGET_MEMBER | CURRENT_ASSIGNMENT => match k.string() {
                Some(m) => Some(m),
                None => return,
            },
            _ => None,
        };
        let g = self
            .groups
            .entry(group_id.clone())
            .or_insert_with(|| ReplayGroup {
                group: ConsumerGroup::new(&group_id),
                ..Default::default()
            });
        let mut v = value.map(Reader);
        let applied = match (version, member, v.as_mut()) {
            (GROUP_METADATA, _, None) => {
                self.groups.remove(&group_id);
                return;
            }
            (GROUP_METADATA, _, Some(v)) => {
                let decoded = v
                    .version0()
                    .and_then(|()| Some((v.i32()?, v.tagged_i64(0)?)));
                decoded.map(|(epoch, hash)| {
                    g.group.epoch = epoch;
                    g.group.metadata_hash = hash.unwrap_or(0);
                    g.exists = true;
                })
            }
            (PARTITION_METADATA, _, None) => {
                g.group.subscribed.clear();
                g.group.legacy_partition_metadata = false;
                Some(())
            }
            (PARTITION_METADATA, _, Some(v)) => decode_topics(v).map(|t| {
                g.group.subscribed = t;
                g.group.legacy_partition_metadata = true;
            }),
            (TARGET_METADATA, _, None) => Some(()),
            (TARGET_METADATA, _, Some(v)) => v
                .version0()
                .and_then(|()| v.i32())
                .map(|e| g.group.assignment_epoch = e),
            (MEMBER_METADATA, Some(m), None) => {
                g.metadata.remove(&m);
                Some(())
            }
            (MEMBER_METADATA, Some(m), Some(v)) => decode_member(v, &m).map(|mm| {
                g.metadata.insert(m, mm);
            }),
            (TARGET_MEMBER, Some(m), None) => {
                g.group.target.remove(&m);
                Some(())
            }
            (TARGET_MEMBER, Some(m), Some(v)) => {
                v.version0().and_then(|()| v.partitions()).map(|a| {
                    g.group.target.insert(m, a);
                })
            }
            (CURRENT_ASSIGNMENT, Some(m), None) => {
                g.current.remove(&m);
                Some(())
            }
            (CURRENT_ASSIGNMENT, Some(m), Some(v)) => decode_current(v).map(|c| {
                g.current.insert(m, c);
            }),
            _ => None,
        };
        if applied.is_none() {
            tracing::warn!(group = %group_id, record = version, "skipping an undecodable consumer group record");
        }
    }

    /// Moves `other`'s groups in (read from another partition).
    pub fn merge(&mut self, mut other: Replay) {
        self.groups.append(&mut other.groups);
    }

    /// The group ids held.
    pub fn group_ids(&self) -> impl Iterator<Item = &String> {
        self.groups.keys()
    }

    /// Moves the group `id` into `other`.
    pub fn move_group(&mut self, id: &str, other: &mut Replay) {
        if let Some(g) = self.groups.remove(id) {
            other.groups.insert(id.to_string(), g);
        }
    }

    /// The groups, rebuilt (members without a timer yet: see
    /// [`ConsumerGroup::restored`]).
    pub fn into_groups(self) -> BTreeMap<String, ConsumerGroup> {
        self.groups
            .into_iter()
            .filter(|(_, g)| g.exists)
            .map(|(id, mut g)| {
                if g.group.metadata_hash == 0 && g.group.legacy_partition_metadata {
                    // written before KIP-1101: the hash of what record 4
                    // held, so that unchanged topics do not rebalance
                    g.group.metadata_hash =
                        metadata_hash::group_hash(g.group.subscribed.values().map(|t| t.hash));
                }
                for (mid, mut m) in std::mem::take(&mut g.metadata) {
                    m.current = g.current.remove(&mid).unwrap_or_default();
                    g.group.members.insert(mid, m);
                }
                (id, g.group)
            })
            .collect()
    }
}

fn decode_topics(v: &mut Reader) -> Option<BTreeMap<String, TopicMeta>> {
    v.version0()?;
    let mut out = BTreeMap::new();
    for _ in 0..v.array_len(23)? {
        let id = v.uuid()?;
        let name = v.compact_str()??;
        let partitions = v.i32()?;
        let mut racks: BTreeMap<i32, Vec<String>> = BTreeMap::new();
        for _ in 0..v.array_len(6)? {
            let p = v.i32()?;
            for _ in 0..v.array_len(1)? {
                if let Some(r) = v.compact_str()? {
                    racks.entry(p).or_default().push(r);
                }
            }
            v.tags()?;
        }
        v.tags()?;
        let meta = TopicMeta::new(&name, id, partitions, |p| {
            racks.get(&p).cloned().unwrap_or_default()
        });
        out.insert(name, meta);
    }
    Some(out)
}

fn decode_member(v: &mut Reader, id: &str) -> Option<Member> {
    v.version0()?;
    let instance_id = v.compact_str()?;
    let rack_id = v.compact_str()?;
    let client_id = v.compact_str()?.unwrap_or_default();
    let client_host = v.compact_str()?.unwrap_or_default();
    let mut subscribed_names = Vec::new();
    for _ in 0..v.array_len(1)? {
        subscribed_names.push(v.compact_str()??);
    }
    let regex = v.compact_str()?;
    let rebalance_timeout_ms = v.i32()?;
    let server_assignor = v.compact_str()?;
    let mut classic = None;
    for _ in 0..v.uvarint()? {
        let tag = v.uvarint()?;
        let len = v.uvarint()? as usize;
        let mut field = Reader(v.take(len)?);
        if tag == 0 {
            classic = decode_classic(&mut field)?;
        }
    }
    Some(Member {
        id: id.to_string(),
        instance_id,
        rack_id,
        client_id,
        client_host,
        subscribed_names,
        regex,
        rebalance_timeout_ms,
        server_assignor,
        classic,
        ..Default::default()
    })
}

/// `ClassicMemberMetadata` (a tagged nullable struct: 0 for null, else
/// the struct).
fn decode_classic(v: &mut Reader) -> Option<Option<ClassicMetadata>> {
    if v.uvarint()? == 0 {
        return Some(None);
    }
    let session_timeout_ms = v.i32()?;
    let mut protocols = Vec::new();
    for _ in 0..v.array_len(3)? {
        let name = v.compact_str()??;
        let len = (v.uvarint()? as usize).checked_sub(1)?;
        let metadata = v.take(len)?;
        v.tags()?;
        protocols.push((name, metadata));
    }
    v.tags()?;
    Some(Some(ClassicMetadata {
        session_timeout_ms,
        protocols,
    }))
}

fn decode_current(v: &mut Reader) -> Option<CurrentAssignment> {
    v.version0()?;
    let epoch = v.i32()?;
    let previous_epoch = v.i32()?;
    let state = MemberState::from_code(v.u8()? as i8);
    let assigned = v.partitions()?;
    let revoking = v.partitions()?;
    Some(CurrentAssignment {
        epoch,
        previous_epoch,
        state,
        assigned,
        revoking,
    })
}
