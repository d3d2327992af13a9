//! Client telemetry (KIP-714) end to end over the wire: a real standalone
//! broker (in-process, 127.0.0.1, ephemeral ports) asked with the
//! `kafka-protocol` codec what a Kafka client asks. A client-metrics
//! resource set with IncrementalAlterConfigs (and read back with
//! DescribeConfigs, listed with ListConfigResources v0), a subscription got with GetTelemetrySubscriptions,
//! an OTLP payload (gzip-compressed) pushed with PushTelemetry and its
//! metric seen on `/metrics`; then Kafka's error codes for a push too
//! early, a stale subscription id, a payload over `telemetry.max.bytes`,
//! an undecodable one, an unknown compression, and the terminating push
//! that removes the client's series. In a two-broker `--cluster dir`
//! cluster, a resource set through one broker reaches the other's
//! metadata image (through the controller).

mod cluster_common;
mod wire_common;

use std::io::Write;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ListConfigResourcesRequest,
    ListConfigResourcesResponse, PushTelemetryRequest, PushTelemetryResponse,
};
use kafka_protocol::protocol::StrBytes;
use moldau_broker::telemetry::otlp;
use prost::Message;
use tokio::net::TcpStream;
use wire_common::{call, metrics_page, start};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn set_client_metrics(
    c: &mut TcpStream,
    name: &str,
    configs: &[(&str, &str)],
) -> (i16, String) {
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(16)
            .with_resource_name(s(name))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        AlterableConfig::default()
                            .with_name(s(k))
                            .with_config_operation(0)
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            ),
    ]);
    let resp: IncrementalAlterConfigsResponse =
        call(c, ApiKey::IncrementalAlterConfigs, 1, &req).await;
    let r = &resp.responses[0];
    (
        r.error_code,
        r.error_message.as_deref().unwrap_or_default().to_string(),
    )
}

async fn describe_client_metrics(c: &mut TcpStream, name: &str) -> Vec<(String, String, i8)> {
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(16)
            .with_resource_name(s(name))]);
    let resp: DescribeConfigsResponse = call(c, ApiKey::DescribeConfigs, 4, &req).await;
    let r = &resp.results[0];
    assert_eq!(r.error_code, 0, "{r:?}");
    r.configs
        .iter()
        .map(|e| {
            (
                e.name.to_string(),
                e.value.as_deref().unwrap_or_default().to_string(),
                e.config_source,
            )
        })
        .collect()
}

fn payload(name: &str, value: f64) -> Vec<u8> {
    otlp::MetricsData {
        resource_metrics: vec![otlp::ResourceMetrics {
            resource: None,
            scope_metrics: vec![otlp::ScopeMetrics {
                scope: None,
                metrics: vec![otlp::Metric {
                    name: name.into(),
                    description: String::new(),
                    unit: String::new(),
                    data: Some(otlp::MetricData::Gauge(otlp::Gauge {
                        data_points: vec![otlp::NumberDataPoint {
                            attributes: vec![otlp::KeyValue {
                                key: "node_id".into(),
                                value: Some(otlp::AnyValue {
                                    value: Some(otlp::Value::StringValue("1".into())),
                                }),
                            }],
                            start_time_unix_nano: 0,
                            time_unix_nano: 1,
                            value: Some(otlp::NumberValue::AsDouble(value)),
                        }],
                    })),
                }],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
    .encode_to_vec()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

async fn push(
    c: &mut TcpStream,
    id: uuid::Uuid,
    subscription_id: i32,
    compression_type: i8,
    metrics: Vec<u8>,
    terminating: bool,
) -> i16 {
    let req = PushTelemetryRequest::default()
        .with_client_instance_id(id)
        .with_subscription_id(subscription_id)
        .with_compression_type(compression_type)
        .with_terminating(terminating)
        .with_metrics(metrics.into());
    let resp: PushTelemetryResponse = call(c, ApiKey::PushTelemetry, 0, &req).await;
    resp.error_code
}

async fn get(c: &mut TcpStream, id: uuid::Uuid) -> GetTelemetrySubscriptionsResponse {
    call(
        c,
        ApiKey::GetTelemetrySubscriptions,
        0,
        &GetTelemetrySubscriptionsRequest::default().with_client_instance_id(id),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_client_metrics_show_on_the_metrics_page() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &["--set", "telemetry.max.bytes=4096"]).await;
    let mut c = broker.connect().await;

    // both APIs advertised at v0
    let v: ApiVersionsResponse = call(
        &mut c,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default()
            .with_client_software_name(s("apache-kafka-java"))
            .with_client_software_version(s("4.4.0")),
    )
    .await;
    for api in [ApiKey::GetTelemetrySubscriptions, ApiKey::PushTelemetry] {
        let k = v
            .api_keys
            .iter()
            .find(|k| k.api_key == api as i16)
            .unwrap_or_else(|| panic!("{api:?} advertised"));
        assert_eq!((k.min_version, k.max_version), (0, 0));
    }

    // no resource yet: no metrics, Kafka's default interval
    let none = get(&mut c, uuid::Uuid::nil()).await;
    assert_eq!(none.error_code, 0);
    assert!(none.requested_metrics.is_empty());
    assert_eq!(none.push_interval_ms, 300_000);

    // a resource with Kafka's rules
    let (code, msg) = set_client_metrics(&mut c, "bad", &[("interval.ms", "99")]).await;
    assert_eq!(code, ResponseError::InvalidRequest.code(), "{msg}");
    assert!(
        msg.contains("interval must be between 100 and 3600000"),
        "{msg}"
    );
    let (code, msg) = set_client_metrics(&mut c, "bad", &[("match", "colour=red")]).await;
    assert_eq!(code, ResponseError::InvalidConfig.code(), "{msg}");
    let (code, msg) = set_client_metrics(
        &mut c,
        "java-producers",
        &[
            ("metrics", "org.apache.kafka.producer."),
            ("interval.ms", "200"),
            (
                "match",
                "client_software_name=apache-kafka-java,client_id=tele.*",
            ),
        ],
    )
    .await;
    assert_eq!(code, 0, "{msg}");
    let described = describe_client_metrics(&mut c, "java-producers").await;
    assert!(
        described.contains(&("interval.ms".into(), "200".into(), 7)),
        "{described:?}"
    );
    assert!(
        described.contains(&("metrics".into(), "org.apache.kafka.producer.".into(), 7)),
        "{described:?}"
    );
    // listed (ListConfigResources v0, `kafka-client-metrics --list`)
    let listed: ListConfigResourcesResponse = call(
        &mut c,
        ApiKey::ListConfigResources,
        0,
        &ListConfigResourcesRequest::default(),
    )
    .await;
    assert_eq!(listed.error_code, 0);
    let names: Vec<String> = listed
        .config_resources
        .iter()
        .map(|r| r.resource_name.to_string())
        .collect();
    assert_eq!(names, ["java-producers"]);
    // never set: Kafka's defaults
    let unset = describe_client_metrics(&mut c, "nothing").await;
    assert!(
        unset.contains(&("interval.ms".into(), "300000".into(), 5)),
        "{unset:?}"
    );

    // the connection's client id is `wire-test`: not matched
    let other = get(&mut c, uuid::Uuid::nil()).await;
    assert!(other.requested_metrics.is_empty());
    let (code, _) = set_client_metrics(
        &mut c,
        "java-producers",
        &[("match", "client_software_name=apache-kafka-java")],
    )
    .await;
    assert_eq!(code, 0);

    let sub = get(&mut c, uuid::Uuid::nil()).await;
    assert_eq!(sub.error_code, 0, "{sub:?}");
    let id = sub.client_instance_id;
    assert!(!id.is_nil());
    assert_eq!(sub.push_interval_ms, 200);
    assert_eq!(sub.requested_metrics, vec![s("org.apache.kafka.producer.")]);
    assert_eq!(sub.telemetry_max_bytes, 4096);
    assert_eq!(sub.accepted_compression_types, vec![4, 3, 1, 2]);

    // asking again at once: throttled
    let again = get(&mut c, id).await;
    assert_eq!(
        again.error_code,
        ResponseError::ThrottlingQuotaExceeded.code()
    );

    let name = "org.apache.kafka.producer.record.queue.time.avg";
    let code = push(
        &mut c,
        id,
        sub.subscription_id,
        1,
        gzip(&payload(name, 1.5)),
        false,
    )
    .await;
    assert_eq!(code, 0);
    // the instance id as Kafka prints it (base64url)
    let shown_id = moldau_broker::telemetry::subscriptions::kafka_uuid(id);
    let page = metrics_page(broker.addrs.http).await;
    let line = page
        .lines()
        .find(|l| l.starts_with("moldau_client_metric{") && l.contains(name))
        .unwrap_or_else(|| panic!("no client metric in:\n{page}"));
    assert!(
        line.contains(&format!("client_instance_id=\"{shown_id}\"")),
        "{line}"
    );
    assert!(line.contains("attributes=\"node_id=1\""), "{line}");
    assert!(line.ends_with(" 1.5"), "{line}");

    // pushes refused, each with its error; a quarter second after each
    // (more than the 200 ms interval) the next is not too early
    let refused = [
        (
            "too early for the next push",
            sub.subscription_id,
            0,
            payload(name, 2.0),
            ResponseError::ThrottlingQuotaExceeded,
        ),
        (
            "a stale subscription id",
            sub.subscription_id ^ 1,
            0,
            payload(name, 2.0),
            ResponseError::UnknownSubscriptionId,
        ),
        (
            "unknown compression",
            sub.subscription_id,
            7,
            payload(name, 2.0),
            ResponseError::UnsupportedCompressionType,
        ),
        (
            "over telemetry.max.bytes",
            sub.subscription_id,
            0,
            vec![0; 5000],
            ResponseError::TelemetryTooLarge,
        ),
        (
            "not OTLP",
            sub.subscription_id,
            0,
            vec![0xff; 64],
            ResponseError::InvalidRecord,
        ),
        (
            "gzip that is not gzip",
            sub.subscription_id,
            1,
            vec![1, 2, 3],
            ResponseError::InvalidRecord,
        ),
    ];
    for (what, subscription_id, compression, metrics, error) in refused {
        let code = push(&mut c, id, subscription_id, compression, metrics, false).await;
        assert_eq!(code, error.code(), "{what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let code = push(
        &mut c,
        id,
        sub.subscription_id,
        0,
        payload(name, 2.0),
        false,
    )
    .await;
    assert_eq!(code, 0);
    let page = metrics_page(broker.addrs.http).await;
    assert!(
        page.lines()
            .any(|l| l.starts_with("moldau_client_metric{") && l.ends_with(" 2.0")),
        "{page}"
    );

    // the terminating push (not throttled) removes the client's series;
    // nothing is taken from it afterwards
    let code = push(&mut c, id, sub.subscription_id, 0, payload(name, 3.0), true).await;
    assert_eq!(code, 0);
    let page = metrics_page(broker.addrs.http).await;
    assert!(!page.contains(&shown_id), "{page}");
    let code = push(
        &mut c,
        id,
        sub.subscription_id,
        0,
        payload(name, 3.0),
        false,
    )
    .await;
    assert_eq!(code, ResponseError::InvalidRequest.code());
    // a zero instance id
    let code = push(&mut c, uuid::Uuid::nil(), 0, 0, payload(name, 3.0), false).await;
    assert_eq!(code, ResponseError::InvalidRequest.code());

    // the resource survives a restart (the standalone broker's file)
    drop(c);
    broker.stop().await;
    let broker = start(dir.path(), &[]).await;
    let mut c = broker.connect().await;
    let described = describe_client_metrics(&mut c, "java-producers").await;
    assert!(
        described.contains(&("interval.ms".into(), "200".into(), 7)),
        "{described:?}"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_shares_client_metrics_resources() {
    let dirs = cluster_common::ClusterDirs::new();
    let (brokers, mut s0) = cluster_common::two_brokers(|n| dirs.start(n, &[])).await;
    let (code, msg) = set_client_metrics(
        &mut s0,
        "everyone",
        &[("metrics", "*"), ("interval.ms", "1000")],
    )
    .await;
    assert_eq!(code, 0, "{msg}");
    let mut s1 = brokers[&1].connect(Duration::from_secs(30)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let sub = get(&mut s1, uuid::Uuid::nil()).await;
        if sub.error_code == 0 && sub.push_interval_ms == 1000 {
            assert_eq!(sub.requested_metrics, vec![s("*")]);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "broker 1 never saw the resource: {sub:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let described = describe_client_metrics(&mut s1, "everyone").await;
    assert!(
        described.contains(&("interval.ms".into(), "1000".into(), 7)),
        "{described:?}"
    );
}
