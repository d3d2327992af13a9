package io.moldau.e2e;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java Kafka client as the compatibility suite drives it (see
 * e2e/clients/clients.py, class JavaClient). Records travel as text lines so that
 * no JSON library is needed:
 *
 * <pre>
 *   record line:  KEY \t VALUE \t TIMESTAMP \t HEADERS
 *   KEY, VALUE:   base64, or "~" for null
 *   HEADERS:      comma-separated NAME:VALUE, both base64, VALUE "~" for null; empty if none
 * </pre>
 *
 * <ul>
 *   <li>{@code produce BOOTSTRAP TOPIC PARTITION COMPRESSION} reads record lines from stdin,
 *       sends them with acks=all and idempotence disabled, prints one acknowledged offset per
 *       line, in input order.
 *   <li>{@code consume BOOTSTRAP TOPIC PARTITION START COUNT TIMEOUT_MS} assigns the partition
 *       (no consumer group), seeks to START and prints COUNT lines {@code OFFSET \t record line
 *       \t TIMESTAMP_TYPE}; exits 3 if fewer arrived before the timeout.
 *   <li>{@code offsets BOOTSTRAP TOPIC PARTITION} prints {@code beginning end}.
 * </ul>
 */
public final class ClientCheck {
  private ClientCheck() {}

  private static final Base64.Encoder ENC = Base64.getEncoder();
  private static final Base64.Decoder DEC = Base64.getDecoder();

  public static void main(String[] args) throws Exception {
    if (args.length < 1) {
      usage();
    }
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    switch (args[0]) {
      case "produce" -> {
        if (args.length != 5) {
          usage();
        }
        produce(args[1], args[2], Integer.parseInt(args[3]), args[4], out);
      }
      case "consume" -> {
        if (args.length != 7) {
          usage();
        }
        int rc =
            consume(
                args[1],
                args[2],
                Integer.parseInt(args[3]),
                Long.parseLong(args[4]),
                Integer.parseInt(args[5]),
                Long.parseLong(args[6]),
                out);
        out.flush();
        System.exit(rc);
      }
      case "offsets" -> {
        if (args.length != 4) {
          usage();
        }
        offsets(args[1], args[2], Integer.parseInt(args[3]), out);
      }
      default -> usage();
    }
    out.flush();
  }

  private static void usage() {
    System.err.println(
        "usage: ClientCheck produce BOOTSTRAP TOPIC PARTITION COMPRESSION < records\n"
            + "       ClientCheck consume BOOTSTRAP TOPIC PARTITION START COUNT TIMEOUT_MS\n"
            + "       ClientCheck offsets BOOTSTRAP TOPIC PARTITION");
    System.exit(2);
  }

  private static byte[] decodeNullable(String s) {
    return "~".equals(s) ? null : DEC.decode(s);
  }

  private static String encodeNullable(byte[] b) {
    return b == null ? "~" : ENC.encodeToString(b);
  }

  static void produce(String bootstrap, String topic, int partition, String compression, PrintStream out)
      throws Exception {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
    p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
    p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
    p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "1");
    p.put(ProducerConfig.RETRIES_CONFIG, "0");
    p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
    p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
    p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
    p.put(ProducerConfig.CLIENT_ID_CONFIG, "moldau-e2e-java-producer");
    List<Future<RecordMetadata>> acks = new ArrayList<>();
    try (KafkaProducer<byte[], byte[]> producer =
            new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        BufferedReader in =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
      String line;
      while ((line = in.readLine()) != null) {
        if (line.isEmpty()) {
          continue;
        }
        String[] f = line.split("\t", -1);
        byte[] key = decodeNullable(f[0]);
        byte[] value = decodeNullable(f[1]);
        Long ts = "~".equals(f[2]) ? null : Long.parseLong(f[2]);
        List<Header> headers = new ArrayList<>();
        if (f.length > 3 && !f[3].isEmpty()) {
          for (String h : f[3].split(",", -1)) {
            String[] kv = h.split(":", -1);
            String name = new String(DEC.decode(kv[0]), StandardCharsets.UTF_8);
            headers.add(new RecordHeader(name, decodeNullable(kv[1])));
          }
        }
        acks.add(producer.send(new ProducerRecord<>(topic, partition, ts, key, value, headers)));
      }
      producer.flush();
      for (Future<RecordMetadata> f : acks) {
        out.println(f.get().offset());
      }
    }
  }

  private static KafkaConsumer<byte[], byte[]> consumer(String bootstrap) {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
    p.put(ConsumerConfig.CLIENT_ID_CONFIG, "moldau-e2e-java-consumer");
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
    p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
    p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
    return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  static int consume(
      String bootstrap, String topic, int partition, long start, int count, long timeoutMs, PrintStream out) {
    TopicPartition tp = new TopicPartition(topic, partition);
    int got = 0;
    try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap)) {
      c.assign(List.of(tp));
      c.seek(tp, start);
      long deadline = System.currentTimeMillis() + timeoutMs;
      while (got < count && System.currentTimeMillis() < deadline) {
        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
          if (got >= count) {
            break;
          }
          StringBuilder hs = new StringBuilder();
          for (Header h : r.headers()) {
            if (hs.length() > 0) {
              hs.append(',');
            }
            hs.append(ENC.encodeToString(h.key().getBytes(StandardCharsets.UTF_8)))
                .append(':')
                .append(encodeNullable(h.value()));
          }
          out.println(
              r.offset()
                  + "\t"
                  + encodeNullable(r.key())
                  + "\t"
                  + encodeNullable(r.value())
                  + "\t"
                  + r.timestamp()
                  + "\t"
                  + hs
                  + "\t"
                  + r.timestampType().name);
          got++;
        }
      }
    }
    if (got < count) {
      System.err.println("consumed " + got + " of " + count + " records before the timeout");
      return 3;
    }
    return 0;
  }

  static void offsets(String bootstrap, String topic, int partition, PrintStream out) {
    TopicPartition tp = new TopicPartition(topic, partition);
    try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap)) {
      long b = c.beginningOffsets(List.of(tp)).get(tp);
      long e = c.endOffsets(List.of(tp)).get(tp);
      out.println(b + " " + e);
    }
  }
}
