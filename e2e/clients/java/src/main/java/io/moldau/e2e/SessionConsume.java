package io.moldau.e2e;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A Java group consumer for e2e/clients/test_fetch_sessions.py: subscribes to a topic in a
 * consumer group (so its fetches span all the topic's partitions and use fetch sessions) and
 * prints each record as a line {@code PARTITION \t OFFSET \t KEY \t VALUE \t TIMESTAMP \t
 * HEADERS \t TIMESTAMP_TYPE} (the fields as ClientCheck prints them: base64, "~" for null,
 * headers as comma-separated NAME:VALUE), until COUNT records arrived (exit 0) or TIMEOUT_MS
 * passed (exit 3). With {@code moldau.done.file=PATH} it creates PATH once it has read every
 * record, and with {@code moldau.stop.file=PATH} it keeps polling after that (no more records
 * are expected) until PATH exists or TIMEOUT_MS passed: so a test can hold two consumers
 * polling side by side, their fetches meeting each other's sessions, for as long as it needs,
 * however late one JVM started.
 *
 * <p>Usage: {@code SessionConsume BOOTSTRAP GROUP TOPIC COUNT TIMEOUT_MS [name=value ...]},
 * the name=value pairs being consumer properties (and the moldau.* options above).
 */
public final class SessionConsume {
  private SessionConsume() {}

  private static final Base64.Encoder ENC = Base64.getEncoder();

  private static String b64(byte[] b) {
    return b == null ? "~" : ENC.encodeToString(b);
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 5) {
      System.err.println(
          "usage: SessionConsume BOOTSTRAP GROUP TOPIC COUNT TIMEOUT_MS [name=value ...]");
      System.exit(2);
    }
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, args[1]);
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.CLIENT_ID_CONFIG, "moldau-e2e-java-sessions");
    Path doneFile = null;
    Path stopFile = null;
    for (int i = 5; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      String name = args[i].substring(0, eq);
      String value = args[i].substring(eq + 1);
      if (name.equals("moldau.done.file")) {
        doneFile = Path.of(value);
      } else if (name.equals("moldau.stop.file")) {
        stopFile = Path.of(value);
      } else {
        props.put(name, value);
      }
    }
    String topic = args[2];
    long count = Long.parseLong(args[3]);
    long deadline = System.currentTimeMillis() + Long.parseLong(args[4]);
    long seen = 0;
    try (KafkaConsumer<byte[], byte[]> consumer =
        new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      consumer.subscribe(List.of(topic));
      while (seen < count && System.currentTimeMillis() < deadline) {
        ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(200));
        for (ConsumerRecord<byte[], byte[]> r : recs) {
          List<String> hs = new ArrayList<>();
          for (Header h : r.headers()) {
            hs.add(b64(h.key().getBytes(StandardCharsets.UTF_8)) + ":" + b64(h.value()));
          }
          out.println(
              r.partition()
                  + "\t"
                  + r.offset()
                  + "\t"
                  + b64(r.key())
                  + "\t"
                  + b64(r.value())
                  + "\t"
                  + r.timestamp()
                  + "\t"
                  + String.join(",", hs)
                  + "\t"
                  + r.timestampType().name);
          seen++;
        }
      }
      if (seen >= count && doneFile != null) {
        Files.createFile(doneFile);
      }
      while (seen >= count
          && stopFile != null
          && !Files.exists(stopFile)
          && System.currentTimeMillis() < deadline) {
        seen += consumer.poll(Duration.ofMillis(200)).count();
      }
    }
    out.flush();
    System.exit(seen >= count ? 0 : 3);
  }
}
