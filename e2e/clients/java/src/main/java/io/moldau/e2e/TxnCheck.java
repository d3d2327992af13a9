package io.moldau.e2e;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Transactions with the Java client (e2e/clients/test_transactions.py).
 *
 * <p>{@code run BOOTSTRAP TOPIC TRANSACTIONAL_ID} commits c0..c4, aborts a0..a2, commits c5
 * (partition 0), then a second producer with the same transactional id initialises, and the
 * first one's next transaction must fail as fenced (PRODUCER_FENCED or INVALID_PRODUCER_EPOCH). Prints the values a read_committed
 * consumer reads (one per line), then {@code FENCED} if the old producer was fenced.
 */
public final class TxnCheck {
  private TxnCheck() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 4 || !args[0].equals("run")) {
      System.err.println("usage: TxnCheck run BOOTSTRAP TOPIC TRANSACTIONAL_ID");
      System.exit(2);
    }
    String bootstrap = args[1];
    String topic = args[2];
    String tid = args[3];
    try (KafkaProducer<byte[], byte[]> p = producer(bootstrap, tid)) {
      p.initTransactions();
      send(p, topic, List.of("c0", "c1", "c2", "c3", "c4"), true);
      send(p, topic, List.of("a0", "a1", "a2"), false);
      send(p, topic, List.of("c5"), true);
      try (KafkaProducer<byte[], byte[]> next = producer(bootstrap, tid)) {
        next.initTransactions();
        boolean fenced = false;
        try {
          send(p, topic, List.of("zombie"), true);
        } catch (Exception e) {
          // from the send's future (ExecutionException) or from the commit
          for (Throwable t = e; t != null; t = t.getCause()) {
            // the coordinator's PRODUCER_FENCED (AddPartitionsToTxn), or the
            // partition's INVALID_PRODUCER_EPOCH (transaction version 2, where
            // partitions are added by the produce itself)
            fenced |= t instanceof ProducerFencedException || t instanceof InvalidProducerEpochException;
          }
          if (!fenced) {
            throw e;
          }
        }
        for (String v : readCommitted(bootstrap, topic, 6)) {
          System.out.println(v);
        }
        if (fenced) {
          System.out.println("FENCED");
        }
      }
    }
    System.out.flush();
  }

  private static KafkaProducer<byte[], byte[]> producer(String bootstrap, String tid) {
    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
    props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 60000);
    props.put(ProducerConfig.CLIENT_ID_CONFIG, "moldau-e2e-java-txn");
    return new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
  }

  private static void send(
      KafkaProducer<byte[], byte[]> p, String topic, List<String> values, boolean commit)
      throws Exception {
    p.beginTransaction();
    for (String v : values) {
      p.send(new ProducerRecord<>(topic, 0, null, v.getBytes(StandardCharsets.UTF_8))).get();
    }
    if (commit) {
      p.commitTransaction();
    } else {
      p.abortTransaction();
    }
  }

  private static List<String> readCommitted(String bootstrap, String topic, int expect) {
    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    props.put(ConsumerConfig.CLIENT_ID_CONFIG, "moldau-e2e-java-txn");
    List<String> out = new ArrayList<>();
    try (KafkaConsumer<byte[], byte[]> c =
        new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      TopicPartition tp = new TopicPartition(topic, 0);
      c.assign(List.of(tp));
      c.seek(tp, 0);
      long deadline = System.currentTimeMillis() + 30_000;
      while (System.currentTimeMillis() < deadline) {
        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
          out.add(new String(r.value(), StandardCharsets.UTF_8));
        }
        if (out.size() >= expect && c.position(tp) >= c.endOffsets(List.of(tp)).get(tp)) {
          break;
        }
      }
    }
    return out;
  }
}
