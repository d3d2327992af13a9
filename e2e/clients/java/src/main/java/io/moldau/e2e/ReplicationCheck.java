package io.moldau.e2e;

import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java client as e2e/clients/test_replication.py drives it through broker failures: an
 * idempotent {@code acks=all} producer with the client's own retries.
 *
 * <ul>
 *   <li>{@code produce BOOTSTRAP TOPIC PARTITIONS TAG RATE} sends {@code TAG:PARTITION:SEQ}
 *       round-robin over partitions 0..PARTITIONS-1 (SEQ counts per partition from 0), RATE
 *       records per second, until its stdin is closed; then flushes and exits 0. Every delivery
 *       report is one stdout line: {@code ACK PARTITION SEQ OFFSET} or {@code ERR PARTITION SEQ
 *       EXCEPTION}. A send that throws (the producer can no longer guarantee idempotence) prints
 *       {@code FATAL EXCEPTION} and exits 1.
 * </ul>
 */
public final class ReplicationCheck {
  private ReplicationCheck() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 6 || !"produce".equals(args[0])) {
      System.err.println("usage: ReplicationCheck produce BOOTSTRAP TOPIC PARTITIONS TAG RATE");
      System.exit(2);
    }
    System.exit(
        produce(args[1], args[2], Integer.parseInt(args[3]), args[4], Double.parseDouble(args[5])));
  }

  static int produce(String bootstrap, String topic, int partitions, String tag, double rate)
      throws Exception {
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    AtomicBoolean stop = new AtomicBoolean(false);
    Thread stdin =
        new Thread(
            () -> {
              try (InputStream in = System.in) {
                while (in.read() >= 0) {
                  // anything before EOF is ignored
                }
              } catch (Exception e) {
                // closed: stop as well
              }
              stop.set(true);
            });
    stdin.setDaemon(true);
    stdin.start();

    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
    p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
    p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
    p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
    p.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
    p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
    p.put(ProducerConfig.CLIENT_ID_CONFIG, "moldau-e2e-java-" + tag);
    long gapNanos = (long) (1e9 / rate);
    long[] next = new long[partitions];
    try (KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
      long i = 0;
      long due = System.nanoTime();
      while (!stop.get()) {
        int part = (int) (i % partitions);
        long seq = next[part]++;
        byte[] value = (tag + ":" + part + ":" + seq).getBytes(StandardCharsets.UTF_8);
        try {
          producer.send(
              new ProducerRecord<>(topic, part, null, value),
              (md, e) -> {
                if (e == null) {
                  out.println("ACK " + part + " " + seq + " " + md.offset());
                } else {
                  out.println("ERR " + part + " " + seq + " " + e.getClass().getSimpleName());
                }
              });
        } catch (Exception e) {
          out.println("FATAL " + e);
          return 1;
        }
        i++;
        due += gapNanos;
        long wait = due - System.nanoTime();
        if (wait > 0) {
          Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
        } else if (wait < -1_000_000_000L) {
          due = System.nanoTime(); // behind by more than a second: do not burst
        }
      }
      producer.flush();
    }
    return 0;
  }
}
