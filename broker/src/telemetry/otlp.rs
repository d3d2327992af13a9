//! The part of OpenTelemetry's OTLP metrics protobuf
//! (`opentelemetry/proto/metrics/v1/metrics.proto`, with `common/v1` and
//! `resource/v1`) that KIP-714 payloads carry, as hand-written prost
//! messages with the upstream field numbers, and their flattening into
//! samples.
//!
//! Written here rather than taken from the `opentelemetry-proto` crate:
//! that crate pulls in tonic/serde features and the whole OTLP (traces,
//! logs, collector services) for the five messages read here, and its
//! versions move with the OpenTelemetry SDK's. Fields not declared here
//! (exemplars, exponential histograms, summaries, array values) are
//! skipped by prost as unknown fields.
//!
//! Each gauge or sum data point is one sample, its value `as_double` or
//! `as_int`; a histogram data point gives two, `<name>.count` and
//! `<name>.sum`. A sample's attributes are its data point's, rendered
//! `k=v` sorted and comma-joined (resource attributes are left out: the
//! client instance already identifies the resource).

use std::collections::BTreeMap;

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricsData {
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceMetrics {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeMetrics {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub description: String,
    #[prost(string, tag = "3")]
    pub unit: String,
    #[prost(oneof = "MetricData", tags = "5, 7, 9")]
    pub data: Option<MetricData>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum MetricData {
    #[prost(message, tag = "5")]
    Gauge(Gauge),
    #[prost(message, tag = "7")]
    Sum(Sum),
    #[prost(message, tag = "9")]
    Histogram(Histogram),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Gauge {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sum {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
    #[prost(bool, tag = "3")]
    pub is_monotonic: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<HistogramDataPoint>,
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NumberDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(oneof = "NumberValue", tags = "4, 6")]
    pub value: Option<NumberValue>,
}

#[derive(Clone, Copy, PartialEq, prost::Oneof)]
pub enum NumberValue {
    #[prost(double, tag = "4")]
    AsDouble(f64),
    #[prost(sfixed64, tag = "6")]
    AsInt(i64),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HistogramDataPoint {
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(fixed64, tag = "4")]
    pub count: u64,
    #[prost(double, optional, tag = "5")]
    pub sum: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    #[prost(oneof = "Value", tags = "1, 2, 3, 4")]
    pub value: Option<Value>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(string, tag = "1")]
    StringValue(String),
    #[prost(bool, tag = "2")]
    BoolValue(bool),
    #[prost(int64, tag = "3")]
    IntValue(i64),
    #[prost(double, tag = "4")]
    DoubleValue(f64),
}

/// One value a client pushed: its metric name, the data point's
/// attributes (`k=v,…`, sorted) and the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub attributes: String,
    pub value: f64,
}

/// Decodes an (uncompressed) OTLP `MetricsData` payload.
pub fn decode(payload: &[u8]) -> Result<MetricsData, prost::DecodeError> {
    <MetricsData as prost::Message>::decode(payload)
}

fn render_attributes(attributes: &[KeyValue]) -> String {
    let sorted: BTreeMap<&str, String> = attributes
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::DoubleValue(d)) => d.to_string(),
                None => String::new(),
            };
            (kv.key.as_str(), v)
        })
        .collect();
    sorted
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn number(p: &NumberDataPoint) -> Option<f64> {
    match p.value? {
        NumberValue::AsDouble(d) => Some(d),
        NumberValue::AsInt(i) => Some(i as f64),
    }
}

/// The samples of a payload, in payload order, at most `limit` of them
/// (the caller's cap: the rest are not even rendered). Data points
/// without a value are skipped.
pub fn samples(data: &MetricsData, limit: usize) -> Vec<Sample> {
    let mut out = Vec::new();
    let points = data
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics);
    for metric in points {
        if out.len() >= limit {
            break;
        }
        let mut push = |name: String, attributes: &[KeyValue], value: f64| {
            if out.len() < limit {
                out.push(Sample {
                    name,
                    attributes: render_attributes(attributes),
                    value,
                });
            }
        };
        match &metric.data {
            Some(MetricData::Gauge(Gauge { data_points }))
            | Some(MetricData::Sum(Sum { data_points, .. })) => {
                for p in data_points {
                    if let Some(v) = number(p) {
                        push(metric.name.clone(), &p.attributes, v);
                    }
                }
            }
            Some(MetricData::Histogram(h)) => {
                for p in &h.data_points {
                    push(
                        format!("{}.count", metric.name),
                        &p.attributes,
                        p.count as f64,
                    );
                    if let Some(sum) = p.sum {
                        push(format!("{}.sum", metric.name), &p.attributes, sum);
                    }
                }
            }
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn kv(k: &str, v: Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
        }
    }

    pub(crate) fn payload(metrics: Vec<Metric>) -> Vec<u8> {
        MetricsData {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![kv("client_id", Value::StringValue("c".into()))],
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: None,
                    metrics,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
        .encode_to_vec()
    }

    fn gauge(name: &str, points: Vec<NumberDataPoint>) -> Metric {
        Metric {
            name: name.into(),
            description: String::new(),
            unit: String::new(),
            data: Some(MetricData::Gauge(Gauge {
                data_points: points,
            })),
        }
    }

    fn point(value: NumberValue, attributes: Vec<KeyValue>) -> NumberDataPoint {
        NumberDataPoint {
            attributes,
            start_time_unix_nano: 0,
            time_unix_nano: 1,
            value: Some(value),
        }
    }

    #[test]
    fn gauges_sums_and_histograms_flatten_to_samples() {
        let bytes = payload(vec![
            gauge(
                "org.apache.kafka.producer.record.queue.time.max",
                vec![point(
                    NumberValue::AsDouble(2.5),
                    vec![
                        kv("topic", Value::StringValue("t".into())),
                        kv("node_id", Value::IntValue(1)),
                    ],
                )],
            ),
            Metric {
                name: "sent".into(),
                description: String::new(),
                unit: String::new(),
                data: Some(MetricData::Sum(Sum {
                    data_points: vec![point(NumberValue::AsInt(7), vec![])],
                    aggregation_temporality: 2,
                    is_monotonic: true,
                })),
            },
            Metric {
                name: "latency".into(),
                description: String::new(),
                unit: String::new(),
                data: Some(MetricData::Histogram(Histogram {
                    data_points: vec![HistogramDataPoint {
                        attributes: vec![],
                        start_time_unix_nano: 0,
                        time_unix_nano: 0,
                        count: 4,
                        sum: Some(10.0),
                    }],
                    aggregation_temporality: 2,
                })),
            },
        ]);
        let data = decode(&bytes).unwrap();
        let s = samples(&data, 100);
        assert_eq!(
            s,
            vec![
                Sample {
                    name: "org.apache.kafka.producer.record.queue.time.max".into(),
                    attributes: "node_id=1,topic=t".into(),
                    value: 2.5
                },
                Sample {
                    name: "sent".into(),
                    attributes: String::new(),
                    value: 7.0
                },
                Sample {
                    name: "latency.count".into(),
                    attributes: String::new(),
                    value: 4.0
                },
                Sample {
                    name: "latency.sum".into(),
                    attributes: String::new(),
                    value: 10.0
                },
            ]
        );
        // the cap stops the flattening
        assert_eq!(samples(&data, 2).len(), 2);
    }

    #[test]
    fn garbage_does_not_decode() {
        assert!(decode(b"\xff\xff\xff\xff\xff").is_err());
        // a length running past the end
        assert!(decode(&[0x0a, 0x7f, 0x01]).is_err());
        // empty is an empty MetricsData
        assert_eq!(decode(b"").unwrap(), MetricsData::default());
    }
}
