//! Helpers shared by the wire-level tests that start a real broker
//! (in-process, or as a child process) on 127.0.0.1 and speak the Kafka
//! protocol to it with the `kafka-protocol` codec, over a TCP connection
//! or any stream (a TLS session).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, ProduceRequest,
    ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use moldau_broker::config::Cli;
use moldau_broker::server::{run_reporting, BoundAddresses};
use moldau_broker::storage::batch::BatchBuilder;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};

pub struct Running {
    pub addrs: BoundAddresses,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// The command line of an in-process broker on 127.0.0.1 (ephemeral
/// ports) with data in `dir`, then `extra`.
fn cli(dir: &Path, extra: &[&str]) -> Cli {
    let dir = dir.display().to_string();
    let args = [
        "moldau-broker",
        "--listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--data-dir",
        &dir,
    ];
    <Cli as clap::Parser>::parse_from(args.iter().chain(extra))
}

/// Starts an in-process broker on 127.0.0.1 (ephemeral ports).
pub async fn start(dir: &Path, extra: &[&str]) -> Running {
    let mut args = vec!["--set", "offsets.topic.num.partitions=1"];
    args.extend(extra);
    let cli = cli(dir, &args);
    let (stop, rx) = watch::channel(false);
    let (tx, bound) = oneshot::channel();
    let task = tokio::spawn(run_reporting(cli, rx, false, Some(tx)));
    let addrs = tokio::time::timeout(Duration::from_secs(60), bound)
        .await
        .expect("broker start timed out")
        .expect("broker failed to start");
    Running { addrs, stop, task }
}

/// Why an in-process broker with `extra` arguments refuses to start
/// (panics if it starts).
pub async fn start_error(dir: &Path, extra: &[&str]) -> String {
    let cli = cli(dir, extra);
    let (_stop, rx) = watch::channel(false);
    let started = tokio::time::timeout(
        Duration::from_secs(60),
        moldau_broker::server::run(cli, rx, false),
    )
    .await
    .expect("a broker that should refuse to start kept running");
    format!("{:#}", started.expect_err("the broker must not start"))
}

impl Running {
    pub async fn stop(self) {
        self.stop.send(true).expect("stop");
        self.task.await.expect("join").expect("broker run");
    }
    pub async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addrs.kafka).await.expect("connect")
    }

    /// A connection to listener `name` (upper-case).
    pub async fn connect_to(&self, name: &str) -> TcpStream {
        let addr = self
            .addrs
            .listener(name)
            .unwrap_or_else(|| panic!("no listener {name}: {:?}", self.addrs));
        TcpStream::connect(addr).await.expect("connect")
    }

    /// A connection authenticated with SASL PLAIN as `user` (handshake v1,
    /// SaslAuthenticate v2), both steps asserted to succeed.
    pub async fn login_plain(&self, user: &str, password: &str) -> TcpStream {
        login_plain(self.connect().await, user, password).await
    }
}

/// Authenticates `s` with SASL PLAIN as `user` (handshake v1,
/// SaslAuthenticate v2), both steps asserted to succeed.
pub async fn login_plain(mut s: TcpStream, user: &str, password: &str) -> TcpStream {
    use kafka_protocol::messages::{
        SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
        SaslHandshakeResponse,
    };
    let h: SaslHandshakeResponse = call(
        &mut s,
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
    .await;
    assert_eq!(h.error_code, 0, "PLAIN handshake");
    let token = format!("\0{user}\0{password}");
    let a: SaslAuthenticateResponse = call(
        &mut s,
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(token.into_bytes().into()),
    )
    .await;
    assert_eq!(a.error_code, 0, "{user} authenticates");
    s
}

pub fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.into()))
}

/// One request's frame: its size, header (client id `wire-test`) and body.
pub fn frame<Req: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    req: &Req,
) -> BytesMut {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("wire-test")));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api.request_header_version(version))
        .expect("encode header");
    req.encode(&mut body, version).expect("encode request");
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(&body);
    frame
}

pub async fn send<Req: Encodable>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    req: &Req,
) {
    let frame = frame(api, version, correlation_id, req);
    stream.write_all(&frame).await.expect("write");
}

pub async fn receive<Resp: Decodable>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    timeout: Duration,
) -> Resp {
    let mut len = [0u8; 4];
    tokio::time::timeout(timeout, stream.read_exact(&mut len))
        .await
        .expect("response timed out")
        .expect("read");
    let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
    stream.read_exact(&mut buf).await.expect("read body");
    let mut resp = Bytes::from(buf);
    let h = ResponseHeader::decode(&mut resp, api.response_header_version(version)).expect("hdr");
    assert_eq!(h.correlation_id, correlation_id);
    Resp::decode(&mut resp, version).expect("decode response")
}

pub async fn call<Req: Encodable, Resp: Decodable>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    req: &Req,
) -> Resp {
    send(stream, api, version, 7, req).await;
    receive(stream, api, version, 7, Duration::from_secs(60)).await
}

/// One request and its response over any stream; `Err` if the broker
/// closed the connection instead (or the TLS session failed).
pub async fn try_call<S, Req, Resp>(
    s: &mut S,
    api: ApiKey,
    version: i16,
    req: &Req,
) -> std::io::Result<Resp>
where
    S: AsyncRead + AsyncWrite + Unpin,
    Req: Encodable,
    Resp: Decodable,
{
    s.write_all(&frame(api, version, 11, req)).await?;
    s.flush().await?;
    let mut len = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(30), s.read_exact(&mut len))
        .await
        .map_err(|_| std::io::Error::other("response timed out"))??;
    let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).await?;
    let mut resp = Bytes::from(buf);
    let h = ResponseHeader::decode(&mut resp, api.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 11);
    Ok(Resp::decode(&mut resp, version).unwrap())
}

pub async fn call_on<S, Req, Resp>(s: &mut S, api: ApiKey, version: i16, req: &Req) -> Resp
where
    S: AsyncRead + AsyncWrite + Unpin,
    Req: Encodable,
    Resp: Decodable,
{
    try_call(s, api, version, req).await.expect("answered")
}

/// One uncompressed batch of `values` (keys `k0`, `k1`, …).
pub fn batch(values: &[Vec<u8>]) -> Bytes {
    batch_from(values, -1, -1, 0, Compression::None)
}

/// A batch of `values` (keys `k0`, `k1`, …, CreateTime from
/// 1,700,000,000,000) from producer `pid`/`epoch` with sequences from
/// `first_sequence` (no producer: `pid` -1), compressed with
/// `compression`.
pub fn batch_from(
    values: &[Vec<u8>],
    pid: i64,
    epoch: i16,
    first_sequence: i32,
    compression: Compression,
) -> Bytes {
    BatchBuilder::new()
        .compression(compression)
        .producer(pid, epoch, first_sequence)
        .records(values.iter().enumerate().map(|(i, v)| {
            (
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(v.clone())),
                1_700_000_000_000 + i as i64,
            )
        }))
        .encode()
        .expect("encode batch")
        .into()
}

/// Produces one batch to partition 0 (acks=all): `(error code, base offset)`.
pub async fn produce(stream: &mut TcpStream, topic: &str, records: Bytes) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = call(stream, ApiKey::Produce, 9, &req).await;
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// Sets the user `user`'s producer byte rate to `bytes_per_second`
/// (AlterClientQuotas v1), and waits a moment for the quota to reach the
/// broker's image.
pub async fn set_user_producer_quota<S>(s: &mut S, user: &str, bytes_per_second: f64)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};
    let req = AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(StrBytes::from_static_str("user"))
            .with_entity_name(Some(StrBytes::from_string(user.to_string())))])
        .with_ops(vec![OpData::default()
            .with_key(StrBytes::from_static_str("producer_byte_rate"))
            .with_value(bytes_per_second)])]);
    let r: AlterClientQuotasResponse = call_on(s, ApiKey::AlterClientQuotas, 1, &req).await;
    assert_eq!(r.entries[0].error_code, 0);
    // the quota reaches the broker's image before the produce
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// Produces 64 KiB to partition 0 of `metered` (acks=1), more than a
/// second's worth at a quota of 1 KiB/s: the throttle time answered.
pub async fn produce_throttle<S>(s: &mut S) -> i32
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let req = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name("metered"))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(&[vec![b'x'; 64 * 1024]])))])]);
    let r: ProduceResponse = call_on(s, ApiKey::Produce, 9, &req).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    r.throttle_time_ms
}

/// CreateTopics of one topic: `(error code, message)`.
pub async fn create_topic(
    stream: &mut TcpStream,
    topic: &str,
    partitions: i32,
) -> (i16, Option<String>) {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(600_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)]);
    let resp: CreateTopicsResponse = call(stream, ApiKey::CreateTopics, 7, &req).await;
    let t = &resp.topics[0];
    (
        t.error_code,
        t.error_message.as_ref().map(|m| m.to_string()),
    )
}

/// CreateTopics of one single-partition topic with `configs`, which must
/// succeed.
pub async fn create_with_configs(stream: &mut TcpStream, topic: &str, configs: &[(&str, &str)]) {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(60_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.to_string()))
                            .with_value(Some(StrBytes::from_string(v.to_string())))
                    })
                    .collect(),
            )]);
    let resp: CreateTopicsResponse = call(stream, ApiKey::CreateTopics, 7, &req).await;
    assert_eq!(resp.topics[0].error_code, 0, "{topic}: {resp:?}");
}

/// DeleteTopics of one topic by name: its error code.
pub async fn delete_topic(stream: &mut TcpStream, topic: &str) -> i16 {
    let req = DeleteTopicsRequest::default()
        .with_timeout_ms(600_000)
        .with_topics(vec![
            DeleteTopicState::default().with_name(Some(name(topic)))
        ]);
    let resp: DeleteTopicsResponse = call(stream, ApiKey::DeleteTopics, 6, &req).await;
    resp.responses[0].error_code
}

/// Metadata of `topic` (no auto-creation): its error code.
pub async fn topic_error(stream: &mut TcpStream, topic: &str) -> i16 {
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name(topic)))
        ]));
    let meta: MetadataResponse = call(stream, ApiKey::Metadata, 12, &req).await;
    meta.topics[0].error_code
}

/// Every record of partition 0 from `offset` to the high watermark.
pub async fn fetch_all(stream: &mut TcpStream, topic: &str, mut offset: i64) -> Vec<(i64, Bytes)> {
    let mut out = Vec::new();
    loop {
        let req = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(4 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)])]);
        let resp: FetchResponse = call(stream, ApiKey::Fetch, 12, &req).await;
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "fetch {topic} at {offset}");
        let mut records = p.records.clone().unwrap_or_default();
        let before = out.len();
        while records.has_remaining() {
            let set = RecordBatchDecoder::decode(&mut records).expect("decode batch");
            for r in set.records {
                out.push((r.offset, r.value.unwrap_or_default()));
            }
        }
        if out.len() == before {
            assert!(
                offset >= p.high_watermark,
                "no progress at {offset} below the high watermark {}",
                p.high_watermark
            );
            return out;
        }
        offset = out.last().map(|(o, _)| o + 1).unwrap_or(offset);
    }
}

/// A tmpfs mounted for one test (root needed), unmounted (lazily) on
/// drop. Without root the test fails loudly unless
/// `MOLDAU_SKIP_MOUNT_TESTS=1`, in which case `None` is returned.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { dir }),
            other => {
                let why = format!("cannot mount a tmpfs (root needed): {other:?}");
                if std::env::var("MOLDAU_SKIP_MOUNT_TESTS").as_deref() == Ok("1") {
                    eprintln!("SKIPPED (MOLDAU_SKIP_MOUNT_TESTS=1): {why}");
                    None
                } else {
                    panic!("{why}; set MOLDAU_SKIP_MOUNT_TESTS=1 to skip");
                }
            }
        }
    }
    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
    /// Free bytes (for unprivileged users) of the filesystem.
    pub fn free_bytes(&self) -> u64 {
        let c =
            std::ffi::CString::new(self.dir.path().as_os_str().as_encoded_bytes()).expect("path");
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid C string and out pointer.
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        st.f_bavail as u64 * st.f_frsize as u64
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Whether a response (any byte) is waiting on `stream`, without waiting.
pub fn has_pending_bytes(stream: &TcpStream) -> bool {
    use std::os::unix::io::AsRawFd;
    let mut b = [0u8; 1];
    // SAFETY: recv into a 1-byte buffer on a valid socket; MSG_PEEK leaves
    // the data in place and MSG_DONTWAIT never blocks.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// A value of the Prometheus text `text` for the unlabelled metric `name`.
pub fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// How to start a [`Child`] broker.
#[derive(Default)]
pub struct ChildOptions<'a> {
    /// Extra `--set key=value` properties.
    pub settings: &'a [&'a str],
    /// `RLIMIT_NOFILE` (soft and hard) of the child.
    pub open_files: Option<u64>,
    /// Extra command-line arguments.
    pub args: &'a [&'a str],
}

/// A free address on 127.0.0.1 that no earlier call of this process
/// returned, below the kernel's ephemeral ports (see `moldau_e2e::ports`).
pub fn unused_loopback_addr() -> std::net::SocketAddr {
    (
        std::net::Ipv4Addr::LOCALHOST,
        moldau_e2e::ports::unused_loopback_port(),
    )
        .into()
}

/// A broker child process (the binary built with these tests) on
/// 127.0.0.1; killed on drop.
pub struct Child {
    pub child: std::process::Child,
    pub kafka: std::net::SocketAddr,
    pub http: std::net::SocketAddr,
    log: PathBuf,
}

impl Child {
    /// Starts a broker on `data`, logging to `log`.
    pub fn spawn(data: &Path, log: PathBuf, options: ChildOptions<'_>) -> Child {
        use std::os::unix::process::CommandExt;
        let (kafka, http) = (unused_loopback_addr(), unused_loopback_addr());
        let out = std::fs::File::create(&log).expect("log file");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_moldau-broker"));
        cmd.args(["--listen", &kafka.to_string()])
            .args(["--http-listen", &http.to_string()])
            .arg("--data-dir")
            .arg(data)
            .args(["--set", "offsets.topic.num.partitions=1"])
            .env("NO_COLOR", "1")
            .stdout(out.try_clone().expect("dup"))
            .stderr(out);
        for setting in options.settings {
            cmd.args(["--set", setting]);
        }
        cmd.args(options.args);
        if let Some(limit) = options.open_files {
            // SAFETY: only async-signal-safe calls (setrlimit) between fork
            // and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: limit as libc::rlim_t,
                        rlim_max: limit as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().expect("spawn moldau-broker");
        Child {
            child,
            kafka,
            http,
            log,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (at most `within`) for the process to exit on its own.
    pub async fn exited(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "broker still running after {within:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Connects, retrying while the broker starts (or until it accepts
    /// again): accepted and served, not just queued in the backlog.
    pub async fn connect(&self, within: Duration) -> TcpStream {
        self.connect_at(self.kafka, within).await
    }

    /// [`Child::connect`] to `addr`, a PLAINTEXT listener of this broker
    /// other than `--listen`'s (one `listeners` names).
    pub async fn connect_at(&self, addr: std::net::SocketAddr, within: Duration) -> TcpStream {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Ok(mut s) = TcpStream::connect(addr).await {
                let served = tokio::time::timeout(Duration::from_secs(5), async {
                    topic_error(&mut s, "__probe").await
                })
                .await;
                if served.is_ok() {
                    return s;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "broker not serving new connections; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The `/metrics` page.
    pub async fn metrics(&self) -> String {
        metrics_page(self.http).await
    }

    /// Sends `signal` and waits (at most `within`) for the process to exit.
    pub async fn stop(&mut self, signal: i32, within: Duration) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill");
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "broker still running {within:?} after signal {signal}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `/metrics` page of the broker whose HTTP listener is `http`.
pub async fn metrics_page(http: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(http).await.expect("http");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out))
        .await
        .expect("metrics timed out")
        .expect("read");
    String::from_utf8_lossy(&out).into_owned()
}
