//! The broker config round trip, operator writes → broker reads: whatever a
//! `KafkaCluster`'s `spec.config` holds, the `server.properties` the operator
//! renders (`render_properties`) parses in the broker (`parse_properties`,
//! Java `Properties.load` semantics) to exactly the same map. The two crates
//! share no code, so this test is the contract between them.
//!
//! The same file through a real broker process (DescribeConfigs showing the
//! values) is `operator/tests/real_broker.rs`.

use std::collections::BTreeMap;

use moldau_broker::config::parse_properties;
use moldau_operator::cluster::builders::render_properties;

fn round_trip(config: &BTreeMap<String, String>) {
    let text = render_properties(config);
    let parsed = parse_properties(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    if &parsed != config {
        for (k, v) in config {
            assert_eq!(parsed.get(k), Some(v), "key {k:?} in\n{text}");
        }
        panic!("extra keys: {parsed:?} vs {config:?}\n{text}");
    }
}

/// Values (and keys) a reviewer would try first.
const AWKWARD: &[&str] = &[
    "",
    " ",
    "  leading spaces",
    "trailing spaces  ",
    "\ttab first",
    "back\\slash",
    "\\",
    "\\\\",
    "ends with backslash\\",
    "C:\\Program Files\\x",
    "a=b",
    "=starts with equals",
    "a:b",
    ":starts with colon",
    "#not a comment",
    "!not a comment",
    "  # spaced hash",
    "multi\nline\r\nvalue\rhere",
    "form\x0cfeed",
    "\\u0041 stays literal",
    "\\n stays literal",
    "unicode é ü ß € 漢字 😀",
    "\u{0}nul and \u{1b}escape and \u{7f}del",
    "\u{2028}line separator\u{85}",
    "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" password=\"b=c:d\";",
    "key with spaces",
    "listener.name.internal:9093",
];

#[test]
fn awkward_values_and_keys_survive() {
    // Each awkward string as a value of an ordinary key…
    let values: BTreeMap<String, String> = AWKWARD
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("custom.value.{i:02}"), v.to_string()))
        .collect();
    round_trip(&values);
    // … and as a key.
    let keys: BTreeMap<String, String> = AWKWARD
        .iter()
        .enumerate()
        .map(|(i, k)| (k.to_string(), AWKWARD[(i + 1) % AWKWARD.len()].to_string()))
        .collect();
    round_trip(&keys);
    // Ordinary configs render as written.
    let plain = BTreeMap::from([
        ("num.partitions".to_string(), "3".to_string()),
        ("log.retention.ms".to_string(), "604800000".to_string()),
    ]);
    round_trip(&plain);
    assert!(render_properties(&plain).ends_with("\nlog.retention.ms=604800000\nnum.partitions=3\n"));
}

#[test]
fn every_short_string_over_awkward_characters_survives() {
    const ALPHABET: &[char] = &[
        '\\', '=', ':', '#', '!', ' ', '\t', '\n', '\r', '\x0c', 'a', 'u', 'é', '😀', '\u{0}',
    ];
    let mut all = vec![String::new()];
    let mut last = vec![String::new()];
    for _ in 0..3 {
        last = last
            .iter()
            .flat_map(|s| {
                ALPHABET.iter().map(move |c| {
                    let mut t = s.clone();
                    t.push(*c);
                    t
                })
            })
            .collect();
        all.extend(last.iter().cloned());
    }
    assert_eq!(all.len(), 1 + 15 + 225 + 3375);
    // Every string as a key, each with another string as its value, so every
    // string is also a value.
    let n = all.len();
    let config: BTreeMap<String, String> = all
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), all[(i * 7 + 3) % n].clone()))
        .collect();
    round_trip(&config);
}

#[test]
fn longer_pseudo_random_strings_survive() {
    const PIECES: &[&str] = &[
        "\\", "\\\\", "=", ":", "#", "!", " ", "  ", "\t", "\n", "\r\n", "\r", "\x0c", "x", "key",
        ".", "é", "😀", "\\u", "u00e9", "\u{0}", "\u{feff}",
    ];
    // xorshift64: deterministic, no dependency.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    let mut config = BTreeMap::new();
    for _ in 0..2_000 {
        // Up to `max` pieces, at least `min`.
        let mut text = |min: usize, max: usize| -> String {
            let len = min + next(max - min + 1);
            (0..len).map(|_| PIECES[next(PIECES.len())]).collect()
        };
        let key = text(1, 12);
        let value = text(0, 24);
        config.insert(key, value);
    }
    round_trip(&config);
}
