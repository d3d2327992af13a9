//! A connection answering one request at a time costs the broker's
//! runtime one wake-up per request, uncompressed or compressed:
//! - the connection's reader and handler are two tasks
//!   (`protocol::connection`), so neither wakes the other from inside its
//!   own poll, which tokio schedules as a yield and follows by waking a
//!   second worker (2.4 context switches per request before, 1.0 after);
//! - a small compressed batch is checked on the worker itself, not by
//!   handing the worker's tasks to another thread (`block_in_place`) for
//!   microseconds of work.
//!
//! Counted with the runtime's own metrics (how often its workers parked)
//! while a client on a runtime of its own sends paced produce requests of
//! one 1 KiB record. A count, not a timing: the machine's load can only
//! make workers park less (more work waiting when they look).

mod wire_common;

use std::time::Duration;

use kafka_protocol::records::Compression;
use wire_common::*;

const REQUESTS: u64 = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_requests_wake_the_runtime_once_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start(dir.path(), &[]).await;
    let mut admin = broker.connect().await;
    assert_eq!(create_topic(&mut admin, "paced", 1).await.0, 0);
    let addr = broker.addrs.kafka;
    let metrics = tokio::runtime::Handle::current().metrics();
    let parks = || {
        (0..metrics.num_workers())
            .map(|w| metrics.worker_park_count(w))
            .sum::<u64>()
    };
    for compression in [Compression::None, Compression::Lz4] {
        let value = b"moldau paced produce ".repeat(50)[..1024].to_vec();
        let records = batch_from(&[value], -1, -1, 0, compression);
        let before = parks();
        // The client runs on its own runtime in its own thread, so that
        // the parks counted are the broker's; this test's body is not on a
        // worker either (tokio::test drives it from the calling thread),
        // so joining here blocks no worker.
        let client = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("client runtime");
            rt.block_on(async move {
                let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
                stream.set_nodelay(true).expect("nodelay");
                for _ in 0..REQUESTS {
                    let (error, _) = produce(&mut stream, "paced", records.clone()).await;
                    assert_eq!(error, 0, "produce refused");
                    // paced: every request finds the broker's workers parked
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        });
        client.join().expect("client");
        let per_request = (parks() - before) as f64 / REQUESTS as f64;
        // One park per request answered, plus a few for the connection's
        // accept and the broker's periodic tasks. Woken twice more per
        // request, as before, this was above 2.
        assert!(
            per_request < 1.5,
            "{compression:?}: the broker's workers parked {per_request:.2} times per request"
        );
    }
    broker.stop().await;
}
