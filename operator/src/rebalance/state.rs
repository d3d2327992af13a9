//! The planner's working state: the assignment being built (brokers by dense
//! index), the load per broker kept in step with it, and the checks every
//! relocation must pass (topic filter, goal, rack spread).

use std::collections::BTreeMap;

use super::model::{may_move, Broker, BrokerId, BrokerLoad, Goal, Options, Partition, Steps};

/// Load of one broker, by index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Load {
    pub replicas: usize,
    pub leaders: usize,
    pub bytes: u64,
}

/// One partition being planned.
#[derive(Clone, Debug)]
pub(super) struct Part {
    /// Broker indexes; the first is the preferred leader.
    pub replicas: Vec<usize>,
    pub size: u64,
    /// The topic filter lets it move.
    pub movable: bool,
    /// The leader now (an index), for tie-breaks that spare leadership.
    pub current_leader: Option<usize>,
}

#[derive(Clone)]
pub(super) struct State {
    /// Broker id by index (sorted, so indexes order like ids).
    ids: Vec<BrokerId>,
    /// Rack key by index; a broker without a rack has a key of its own.
    rack: Vec<usize>,
    /// Not being removed: counted in the balance.
    pub eligible: Vec<bool>,
    /// May gain replicas and leaderships (all eligible brokers, or only the
    /// added ones for `AddBrokers`).
    pub receiver: Vec<bool>,
    pub parts: Vec<Part>,
    pub load: Vec<Load>,
    /// Distinct racks among eligible brokers.
    eligible_racks: usize,
    /// Byte tolerance in bytes.
    pub tolerance: u64,
    pub steps: Steps,
    /// Names of partitions, for caveats.
    names: Vec<(String, i32)>,
}

impl State {
    /// Builds the state from validated input.
    pub fn new(
        brokers: &[Broker],
        partitions: &[Partition],
        goal: &Goal,
        options: &Options,
    ) -> Self {
        let mut sorted: Vec<&Broker> = brokers.iter().collect();
        sorted.sort_by_key(|b| b.id);
        let ids: Vec<BrokerId> = sorted.iter().map(|b| b.id).collect();
        let index: BTreeMap<BrokerId, usize> =
            ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let rack = rack_keys(&sorted);
        let named =
            |v: &Vec<BrokerId>| -> Vec<bool> { ids.iter().map(|id| v.contains(id)).collect() };
        let (eligible, receiver) = match goal {
            Goal::Full => (vec![true; ids.len()], vec![true; ids.len()]),
            Goal::AddBrokers(added) => (vec![true; ids.len()], named(added)),
            Goal::RemoveBrokers(removed) => {
                let keep: Vec<bool> = named(removed).iter().map(|r| !r).collect();
                (keep.clone(), keep)
            }
        };
        let parts: Vec<Part> = partitions
            .iter()
            .map(|p| Part {
                replicas: p.replicas.iter().map(|b| index[b]).collect(),
                size: p.size_bytes,
                movable: may_move(&p.topic, options),
                current_leader: p.leader.and_then(|l| index.get(&l).copied()),
            })
            .collect();
        let mut racks: Vec<usize> = (0..ids.len())
            .filter(|b| eligible[*b])
            .map(|b| rack[b])
            .collect();
        racks.sort_unstable();
        racks.dedup();
        let mut state = State {
            load: vec![Load::default(); ids.len()],
            ids,
            rack,
            eligible,
            receiver,
            parts,
            eligible_racks: racks.len(),
            tolerance: 0,
            steps: Steps::default(),
            names: partitions
                .iter()
                .map(|p| (p.topic.clone(), p.partition))
                .collect(),
        };
        state.recount();
        state.tolerance = state.byte_tolerance(options.byte_tolerance_percent);
        state
    }

    fn recount(&mut self) {
        self.load = vec![Load::default(); self.ids.len()];
        for p in &self.parts {
            for (pos, b) in p.replicas.iter().enumerate() {
                let l = &mut self.load[*b];
                l.replicas += 1;
                l.bytes += p.size;
                l.leaders += usize::from(pos == 0);
            }
        }
    }

    /// `percent` of the mean bytes per eligible broker.
    fn byte_tolerance(&self, percent: u32) -> u64 {
        let total: u128 = self
            .parts
            .iter()
            .map(|p| p.size as u128 * p.replicas.len() as u128)
            .sum();
        let brokers = self.eligible.iter().filter(|e| **e).count().max(1) as u128;
        (total * percent as u128 / 100 / brokers) as u64
    }

    /// Number of brokers (indexes are `0..len`).
    pub fn brokers(&self) -> usize {
        self.ids.len()
    }

    /// Eligible broker indexes.
    pub fn eligible_brokers(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.ids.len()).filter(|b| self.eligible[*b])
    }

    /// The replica list of partition `p` as broker ids.
    pub fn replica_ids(&self, p: usize) -> Vec<BrokerId> {
        self.parts[p]
            .replicas
            .iter()
            .map(|b| self.ids[*b])
            .collect()
    }

    /// Load per broker, by id.
    pub fn loads(&self) -> Vec<BrokerLoad> {
        self.ids
            .iter()
            .zip(&self.load)
            .map(|(id, l)| BrokerLoad {
                broker: *id,
                replicas: l.replicas,
                leaders: l.leaders,
                bytes: l.bytes,
            })
            .collect()
    }

    /// max − min of a load measure over eligible brokers.
    pub fn spread(&self, key: impl Fn(&Load) -> u64) -> u64 {
        let values = self.eligible_brokers().map(|b| key(&self.load[b]));
        let (min, max) = values.fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)));
        max.saturating_sub(min)
    }

    /// Eligible brokers ordered by `key` descending, then id.
    pub fn by_desc<K: Ord>(&self, key: impl Fn(&Load) -> K) -> Vec<usize> {
        let mut v: Vec<usize> = self.eligible_brokers().collect();
        v.sort_by(|a, b| key(&self.load[*b]).cmp(&key(&self.load[*a])).then(a.cmp(b)));
        v
    }

    /// Receiving brokers ordered by `key` ascending, then id.
    pub fn receivers_by_asc<K: Ord>(&self, key: impl Fn(&Load) -> K) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .eligible_brokers()
            .filter(|b| self.receiver[*b])
            .collect();
        v.sort_by(|a, b| key(&self.load[*a]).cmp(&key(&self.load[*b])).then(a.cmp(b)));
        v
    }

    /// Partitions with a replica on broker `b`.
    pub fn on(&self, b: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.parts.len()).filter(move |p| self.parts[*p].replicas.contains(&b))
    }

    /// Distinct racks of a replica list with `from` read as `to`. Replica
    /// lists are short, so a quadratic scan beats allocating a set; this
    /// runs for every candidate move.
    fn spread_of(&self, replicas: &[usize], from: usize, to: usize) -> usize {
        let rack = |b: usize| self.rack[if b == from { to } else { b }];
        (0..replicas.len())
            .filter(|i| {
                !replicas[..*i]
                    .iter()
                    .any(|b| rack(*b) == rack(replicas[*i]))
            })
            .count()
    }

    /// Distinct racks of partition `p` now.
    pub fn rack_spread(&self, p: usize) -> usize {
        let reps = &self.parts[p].replicas;
        self.spread_of(reps, usize::MAX, usize::MAX)
    }

    /// The spread partition `p` should have: `min(RF, racks)`.
    pub fn wanted_spread(&self, p: usize) -> usize {
        self.parts[p].replicas.len().min(self.eligible_racks)
    }

    /// Whether broker `b`'s rack already holds a replica of `p`.
    pub fn rack_used(&self, p: usize, b: usize) -> bool {
        self.parts[p]
            .replicas
            .iter()
            .any(|r| self.rack[*r] == self.rack[b])
    }

    /// Racks of `p` holding more than one of its replicas: the brokers there.
    pub fn crowded(&self, p: usize) -> Vec<usize> {
        let reps = &self.parts[p].replicas;
        reps.iter()
            .copied()
            .filter(|b| {
                reps.iter()
                    .filter(|r| self.rack[**r] == self.rack[*b])
                    .count()
                    > 1
            })
            .collect()
    }

    /// Moving `p`'s replica from `from` to `to` keeps its rack spread at
    /// least `min(spread now, wanted)`.
    fn rack_ok(&self, p: usize, from: usize, to: usize) -> bool {
        let reps = &self.parts[p].replicas;
        let after = self.spread_of(reps, from, to);
        after >= self.rack_spread(p).min(self.wanted_spread(p))
    }

    /// Whether `p`'s replica on `from` may be relocated to `to`.
    pub fn can_move(&self, p: usize, from: usize, to: usize) -> bool {
        let part = &self.parts[p];
        part.movable
            && self.eligible[to]
            && self.receiver[to]
            && part.replicas.contains(&from)
            && !part.replicas.contains(&to)
            && self.rack_ok(p, from, to)
    }

    /// Relocates `p`'s replica from `from` to `to`, keeping its position (so
    /// `to` leads if `from` did).
    pub fn relocate(&mut self, p: usize, from: usize, to: usize) {
        let part = &mut self.parts[p];
        let pos = part
            .replicas
            .iter()
            .position(|b| *b == from)
            .expect("replica on from");
        part.replicas[pos] = to;
        let (size, leads) = (part.size, usize::from(pos == 0));
        let f = &mut self.load[from];
        f.replicas -= 1;
        f.bytes -= size;
        f.leaders -= leads;
        let t = &mut self.load[to];
        t.replicas += 1;
        t.bytes += size;
        t.leaders += leads;
    }

    /// Makes `to` (already a replica of `p`) its preferred leader by
    /// swapping it with the first replica.
    pub fn promote(&mut self, p: usize, to: usize) {
        let reps = &mut self.parts[p].replicas;
        let pos = reps
            .iter()
            .position(|b| *b == to)
            .expect("replica to promote");
        let old = reps[0];
        reps.swap(0, pos);
        self.load[old].leaders -= 1;
        self.load[to].leaders += 1;
    }

    /// Replicas and bytes of the whole cluster.
    pub fn totals(&self) -> (i128, i128) {
        let replicas = self.load.iter().map(|l| l.replicas as i128).sum();
        let bytes = self.load.iter().map(|l| l.bytes as i128).sum();
        (replicas, bytes)
    }

    /// Preferred leaderships per eligible broker, rounded up.
    pub fn leader_share(&self) -> usize {
        let brokers = self.eligible_brokers().count().max(1);
        self.parts.len().div_ceil(brokers)
    }

    /// Preferred leader of `p`.
    pub fn leader(&self, p: usize) -> usize {
        self.parts[p].replicas[0]
    }

    /// Partitions below their wanted rack spread: (topic, partition,
    /// spread, wanted).
    pub fn short_of_racks(&self) -> impl Iterator<Item = (String, i32, usize, usize)> + '_ {
        (0..self.parts.len()).filter_map(|p| {
            let (spread, wanted) = (self.rack_spread(p), self.wanted_spread(p));
            (spread < wanted).then(|| {
                let (t, i) = &self.names[p];
                (t.clone(), *i, spread, wanted)
            })
        })
    }
}

/// A dense rack key per broker; brokers without a rack get keys of their own
/// after the named racks.
fn rack_keys(sorted: &[&Broker]) -> Vec<usize> {
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for b in sorted {
        if let Some(r) = &b.rack {
            let next = names.len();
            names.entry(r.as_str()).or_insert(next);
        }
    }
    let mut solo = names.len();
    sorted
        .iter()
        .map(|b| match &b.rack {
            Some(r) => names[r.as_str()],
            None => {
                solo += 1;
                solo - 1
            }
        })
        .collect()
}
