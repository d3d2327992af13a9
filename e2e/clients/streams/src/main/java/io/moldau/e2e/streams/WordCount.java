package io.moldau.e2e.streams;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A word count under Kafka Streams' exactly_once_v2, driven by
 * e2e/clients/test_streams_eos.py.
 *
 * <pre>
 *   WordCount BOOTSTRAP INPUT OUTPUT APPLICATION_ID STATE_DIR [THREADS [GUARANTEE]]
 * </pre>
 *
 * GUARANTEE is exactly_once_v2 by default (at_least_once shows what the
 * test's checks catch without it).
 *
 * Reads lines (string values) from INPUT, splits them on whitespace, groups
 * by word (a repartition topic), counts in a persistent store (its changelog
 * topic, replication factor 3) with the record cache off, so every input
 * word makes exactly one update, and writes word -> count (both strings, the
 * count in decimal) to OUTPUT. Under exactly_once_v2 a read_committed reader
 * of OUTPUT therefore sees, per word, exactly 1, 2, ..., N.
 *
 * Runs until SIGTERM (a clean close) or SIGKILL. On stdout, one line per
 * event, for the test: {@code STATE <new> <old>}, {@code REPLACED <n>
 * <exception>} when a stream thread died and was replaced. Everything
 * else (Kafka's log, stack traces) goes to stderr.
 */
public final class WordCount {
    private WordCount() {}

    public static Topology topology(String input, String output) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\s+")))
                .filter((k, w) -> !w.isEmpty())
                .groupBy((k, w) -> w, Grouped.with("words", Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .mapValues(n -> Long.toString(n))
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    static Properties config(String bootstrap, String appId, String stateDir, int threads, String guarantee) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        p.put(StreamsConfig.topicPrefix("min.insync.replicas"), "2");
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        // no record cache: every input word makes one update of its count
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put("processing.exception.handler.global.enabled", true);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        // a broker killed with -9: retry for long enough, notice it soon
        p.put(StreamsConfig.TASK_TIMEOUT_MS_CONFIG, 120_000);
        p.put(StreamsConfig.RETRY_BACKOFF_MS_CONFIG, 200);
        p.put(StreamsConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        p.put(StreamsConfig.METADATA_MAX_AGE_CONFIG, 5_000);
        p.put(StreamsConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 1_000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10_000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG), 60_000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.MAX_BLOCK_MS_CONFIG), 60_000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10_000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1_000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG), 60_000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG), 100);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        p.put(StreamsConfig.adminClientPrefix("default.api.timeout.ms"), 60_000);
        return p;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: WordCount BOOTSTRAP INPUT OUTPUT APPLICATION_ID STATE_DIR [THREADS [GUARANTEE]]");
            System.exit(2);
        }
        String bootstrap = args[0], input = args[1], output = args[2], appId = args[3];
        Path stateDir = Path.of(args[4]);
        int threads = args.length > 5 ? Integer.parseInt(args[5]) : 1;
        String guarantee = args.length > 6 ? args[6] : StreamsConfig.EXACTLY_ONCE_V2;
        Files.createDirectories(stateDir);

        KafkaStreams streams = new KafkaStreams(topology(input, output), config(bootstrap, appId, stateDir.toString(), threads, guarantee));
        AtomicInteger replaced = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, old) -> {
            say("STATE " + now + " " + old);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                done.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            int n = replaced.incrementAndGet();
            System.err.println("stream thread failed (replacing it, #" + n + "):");
            e.printStackTrace();
            Throwable root = e;
            while (root.getCause() != null && root.getCause() != root) {
                root = root.getCause();
            }
            say("REPLACED " + n + " " + e.getClass().getSimpleName() + ": " + oneLine(e.getMessage())
                    + " / root " + root.getClass().getSimpleName() + ": " + oneLine(root.getMessage()));
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(20));
            done.countDown();
        }, "shutdown"));
        streams.start();
        done.await();
        streams.close(Duration.ofSeconds(20));
        say("EXIT " + streams.state());
    }

    private static String oneLine(String s) {
        return s == null ? "" : s.replaceAll("\\s+", " ");
    }

    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
