//! The push rules and the caps of [`super::ClientTelemetry`].

use std::collections::BTreeMap;
use std::io::Write;

use prost::Message;

use super::otlp::{
    Gauge, Metric, MetricData, MetricsData, NumberDataPoint, NumberValue, ResourceMetrics,
    ScopeMetrics,
};
use super::*;

fn subs(metrics: &str, interval: &str) -> Vec<Subscription> {
    let configs: BTreeMap<String, String> = [
        ("metrics".to_string(), metrics.to_string()),
        ("interval.ms".to_string(), interval.to_string()),
    ]
    .into();
    vec![Subscription::compile("s", &configs)]
}

fn client() -> ClientMetadata {
    ClientMetadata {
        client_id: "producer-1".into(),
        ..Default::default()
    }
}

fn payload(names: &[&str]) -> Vec<u8> {
    MetricsData {
        resource_metrics: vec![ResourceMetrics {
            resource: None,
            scope_metrics: vec![ScopeMetrics {
                scope: None,
                metrics: names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| Metric {
                        name: n.to_string(),
                        description: String::new(),
                        unit: String::new(),
                        data: Some(MetricData::Gauge(Gauge {
                            data_points: vec![NumberDataPoint {
                                attributes: vec![],
                                start_time_unix_nano: 0,
                                time_unix_nano: 0,
                                value: Some(NumberValue::AsDouble(i as f64)),
                            }],
                        })),
                    })
                    .collect(),
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
    .encode_to_vec()
}

fn push(id: Uuid, subscription_id: i32, metrics: &[u8]) -> Push<'_> {
    Push {
        client_instance_id: id,
        subscription_id,
        terminating: false,
        compression_type: 0,
        metrics,
    }
}

const MAX: i32 = DEFAULT_TELEMETRY_MAX_BYTES;

#[test]
fn a_zero_id_gets_a_new_instance_and_the_subscription() {
    let t = ClientTelemetry::default();
    let s = subs("org.apache.kafka.producer.", "1000");
    let a = t.get_subscription(Uuid::nil(), &client(), &s, 10).unwrap();
    assert!(!a.client_instance_id.is_nil());
    assert_eq!(a.push_interval_ms, 1000);
    assert_eq!(a.requested_metrics, ["org.apache.kafka.producer."]);
    // no resource matched: no metrics, Kafka's default interval
    let none = t.get_subscription(Uuid::nil(), &client(), &[], 10).unwrap();
    assert!(none.requested_metrics.is_empty());
    assert_eq!(none.push_interval_ms, 300_000);
}

#[test]
fn pushes_follow_kafkas_rules() {
    let t = ClientTelemetry::default();
    let s = subs("*", "1000");
    let a = t.get_subscription(Uuid::nil(), &client(), &s, 10).unwrap();
    let id = a.client_instance_id;
    let body = payload(&["m"]);
    // asking again within the interval: throttled
    let e = t.get_subscription(id, &client(), &s, 20).unwrap_err();
    assert_eq!(e.code, ResponseError::ThrottlingQuotaExceeded);
    // the first push after a get is allowed at once
    t.push(&push(id, a.subscription_id, &body), &client(), &s, MAX, 30)
        .unwrap();
    // the next one waits for the interval
    let e = t
        .push(&push(id, a.subscription_id, &body), &client(), &s, MAX, 500)
        .unwrap_err();
    assert_eq!(e.code, ResponseError::ThrottlingQuotaExceeded);
    t.push(
        &push(id, a.subscription_id, &body),
        &client(),
        &s,
        MAX,
        1030,
    )
    .unwrap();
    // a stale subscription id
    let e = t
        .push(
            &push(id, a.subscription_id ^ 1, &body),
            &client(),
            &s,
            MAX,
            2030,
        )
        .unwrap_err();
    assert_eq!(e.code, ResponseError::UnknownSubscriptionId);
    // ... lets the client ask again at once
    let again = t.get_subscription(id, &client(), &s, 2031).unwrap();
    assert_eq!(again.subscription_id, a.subscription_id);
    // unknown compression, too large, undecodable
    let mut p = push(id, a.subscription_id, &body);
    p.compression_type = 9;
    let e = t.push(&p, &client(), &s, MAX, 3100).unwrap_err();
    assert_eq!(e.code, ResponseError::UnsupportedCompressionType);
    let e = t
        .push(&push(id, a.subscription_id, &body), &client(), &s, 3, 4200)
        .unwrap_err();
    assert_eq!(e.code, ResponseError::TelemetryTooLarge);
    let e = t
        .push(
            &push(id, a.subscription_id, b"\xff\xff\xff"),
            &client(),
            &s,
            MAX,
            5300,
        )
        .unwrap_err();
    assert_eq!(e.code, ResponseError::InvalidRecord);
    // a zero instance id
    let e = t
        .push(&push(Uuid::nil(), 0, &body), &client(), &s, MAX, 6000)
        .unwrap_err();
    assert_eq!(e.code, ResponseError::InvalidRequest);
}

#[test]
fn a_changed_subscription_makes_the_old_id_stale() {
    let t = ClientTelemetry::default();
    let a = t
        .get_subscription(Uuid::nil(), &client(), &subs("a", "1000"), 0)
        .unwrap();
    let changed = subs("a,b", "1000");
    let e = t
        .push(
            &push(a.client_instance_id, a.subscription_id, &payload(&["a"])),
            &client(),
            &changed,
            MAX,
            5,
        )
        .unwrap_err();
    assert_eq!(e.code, ResponseError::UnknownSubscriptionId);
    let b = t
        .get_subscription(a.client_instance_id, &client(), &changed, 6)
        .unwrap();
    assert_ne!(b.subscription_id, a.subscription_id);
    assert_eq!(b.requested_metrics, ["a", "b"]);
}

#[test]
fn pushed_values_are_shown_until_they_expire_or_the_client_terminates() {
    let t = ClientTelemetry::default();
    let s = subs("*", "1000");
    let a = t.get_subscription(Uuid::nil(), &client(), &s, 0).unwrap();
    let id = a.client_instance_id;
    t.push(
        &push(id, a.subscription_id, &payload(&["x", "y"])),
        &client(),
        &s,
        MAX,
        1,
    )
    .unwrap();
    let (values, _) = t.shown(2);
    assert_eq!(values.len(), 2);
    assert_eq!(values[0].0, subscriptions::kafka_uuid(id));
    assert_eq!(values[0].1, "producer-1");
    // 3 intervals after the push they are gone
    assert_eq!(t.shown(3001).0.len(), 0);
    // a terminating push drops them at once, and nothing after it is taken
    t.push(
        &push(id, a.subscription_id, &payload(&["x"])),
        &client(),
        &s,
        MAX,
        3100,
    )
    .unwrap();
    assert_eq!(t.shown(3101).0.len(), 1);
    let mut last = push(id, a.subscription_id, &[]);
    last.terminating = true;
    // terminating: not throttled though within the interval
    t.push(&last, &client(), &s, MAX, 3200).unwrap();
    assert_eq!(t.shown(3201).0.len(), 0);
    let e = t
        .push(
            &push(id, a.subscription_id, &payload(&["x"])),
            &client(),
            &s,
            MAX,
            5000,
        )
        .unwrap_err();
    assert_eq!(e.code, ResponseError::InvalidRequest);
}

#[test]
fn compressed_payloads_are_decompressed() {
    let t = ClientTelemetry::default();
    let s = subs("*", "1000");
    let a = t.get_subscription(Uuid::nil(), &client(), &s, 0).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&payload(&["gzipped"])).unwrap();
    let body = gz.finish().unwrap();
    let mut p = push(a.client_instance_id, a.subscription_id, &body);
    p.compression_type = 1;
    t.push(&p, &client(), &s, MAX, 1).unwrap();
    assert_eq!(t.shown(2).0[0].2, "gzipped");
    // a zip bomb stops at the bound: INVALID_RECORD, nothing kept
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![0u8; MAX_DECOMPRESSED_BYTES + 1])
        .unwrap();
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 64 * 1024);
    let mut p = push(a.client_instance_id, a.subscription_id, &bomb);
    p.compression_type = 1;
    let e = t.push(&p, &client(), &s, MAX, 2000).unwrap_err();
    assert_eq!(e.code, ResponseError::InvalidRecord);
}

#[test]
fn series_per_client_and_clients_are_capped() {
    let t = ClientTelemetry::default();
    let s = subs("*", "100000");
    let names: Vec<String> = (0..MAX_SERIES_PER_CLIENT + 50)
        .map(|i| format!("metric.{i}.{}", "x".repeat(300)))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let body = payload(&names);
    for n in 0..MAX_CLIENTS_SHOWN + 5 {
        let a = t.get_subscription(Uuid::nil(), &client(), &s, 0).unwrap();
        t.push(
            &push(a.client_instance_id, a.subscription_id, &body),
            &client(),
            &s,
            MAX,
            n as i64,
        )
        .unwrap();
    }
    let (values, dropped) = t.shown(MAX_CLIENTS_SHOWN as i64 + 10);
    let max = MAX_SERIES_PER_CLIENT * MAX_CLIENTS_SHOWN;
    assert!(values.len() <= max.min(MAX_SERIES), "{}", values.len());
    assert!(values.iter().all(|v| v.2.len() <= MAX_LABEL_BYTES));
    let dropped: BTreeMap<_, _> = dropped.into_iter().collect();
    assert!(dropped["series"] > 0);
    // 1005 clients, room for 1000 at most (and the series cap took some)
    assert!(dropped["clients"] >= 5);
}

#[test]
fn instances_are_capped_like_kafkas_cache() {
    let t = ClientTelemetry::default();
    let s = subs("*", "100000");
    for n in 0..MAX_CLIENT_INSTANCES + 10 {
        t.get_subscription(Uuid::nil(), &client(), &s, n as i64)
            .unwrap();
    }
    assert_eq!(t.instances(), MAX_CLIENT_INSTANCES);
}
