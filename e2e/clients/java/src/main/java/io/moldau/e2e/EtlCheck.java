package io.moldau.e2e;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A consume-transform-produce loop with the Java client (e2e/clients/test_transactions.py):
 * a read_committed consumer in a group reads IN, a transactional producer writes each value
 * with an "x" prefix to OUT and commits the consumer's positions with the transaction
 * ({@code sendOffsetsToTransaction} with the consumer's group metadata: TxnOffsetCommit v3+,
 * KIP-447). The first batch it reads is processed and then aborted, and the consumer goes back
 * to the group's committed offsets, so the aborted output and offsets must both vanish.
 *
 * <p>{@code run BOOTSTRAP IN OUT GROUP TRANSACTIONAL_ID EXPECTED} stops once EXPECTED records
 * were committed (or after 120 s) and prints {@code PROCESSED n}, {@code ABORTED n}, then
 * {@code COMMITTED partition offset} for each partition of IN, from the group.
 */
public final class EtlCheck {
  private EtlCheck() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 7 || !args[0].equals("run")) {
      System.err.println("usage: EtlCheck run BOOTSTRAP IN OUT GROUP TRANSACTIONAL_ID EXPECTED");
      System.exit(2);
    }
    String bootstrap = args[1];
    String in = args[2];
    String out = args[3];
    String group = args[4];
    String tid = args[5];
    int expected = Integer.parseInt(args[6]);
    int processed = 0;
    int aborted = 0;
    try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, group);
        KafkaProducer<byte[], byte[]> producer = producer(bootstrap, tid)) {
      producer.initTransactions();
      consumer.subscribe(List.of(in));
      long deadline = System.currentTimeMillis() + 120_000;
      while (processed < expected && System.currentTimeMillis() < deadline) {
        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
        if (records.isEmpty()) {
          continue;
        }
        producer.beginTransaction();
        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : records) {
          byte[] value = ("x" + new String(r.value(), StandardCharsets.UTF_8))
              .getBytes(StandardCharsets.UTF_8);
          producer.send(new ProducerRecord<>(out, r.key(), value));
          next.put(
              new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
        }
        producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
        if (aborted == 0) {
          producer.abortTransaction();
          aborted = records.count();
          rewind(consumer);
          continue;
        }
        producer.commitTransaction();
        processed += records.count();
      }
      System.out.println("PROCESSED " + processed);
      System.out.println("ABORTED " + aborted);
      Set<TopicPartition> assigned = consumer.assignment();
      Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
      Map<Integer, Long> byPartition = new TreeMap<>();
      for (Map.Entry<TopicPartition, OffsetAndMetadata> e : committed.entrySet()) {
        byPartition.put(e.getKey().partition(), e.getValue() == null ? -1 : e.getValue().offset());
      }
      for (Map.Entry<Integer, Long> e : byPartition.entrySet()) {
        System.out.println("COMMITTED " + e.getKey() + " " + e.getValue());
      }
    }
    System.out.flush();
  }

  /** After an abort: back to the group's committed offsets (the start where there are none). */
  private static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
    Set<TopicPartition> assigned = consumer.assignment();
    Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
    for (TopicPartition tp : assigned) {
      OffsetAndMetadata c = committed.get(tp);
      if (c == null) {
        consumer.seekToBeginning(List.of(tp));
      } else {
        consumer.seek(tp, c.offset());
      }
    }
  }

  private static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String group) {
    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 50);
    props.put(ConsumerConfig.CLIENT_ID_CONFIG, "moldau-e2e-java-etl");
    return new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  private static KafkaProducer<byte[], byte[]> producer(String bootstrap, String tid) {
    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
    props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 60000);
    props.put(ProducerConfig.CLIENT_ID_CONFIG, "moldau-e2e-java-etl");
    return new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
  }
}
