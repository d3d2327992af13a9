package io.moldau.e2e;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * One Java group consumer driven from pytest (e2e/clients/test_groups.py): a long-running
 * process that subscribes to a topic in a consumer group and reports what happens as text
 * lines on stdout, one event a line, flushed at once:
 *
 * <pre>
 *   STARTED
 *   ASSIGNED GEN p,p,...     onPartitionsAssigned (GEN: the member's generation then)
 *   REVOKED GEN p,p,...      onPartitionsRevoked
 *   LOST GEN p,p,...         onPartitionsLost
 *   OWNED GEN p,p,...        consumer.assignment() after each callback
 *   REC p offset value       one consumed record (value as UTF-8 text)
 *   COMMITTED                commitSync() after a non-empty poll succeeded
 *   COMMITFAIL message       commitSync() threw
 *   CLOSED                   consumer.close() returned
 * </pre>
 *
 * <p>Usage: {@code GroupCheck consume BOOTSTRAP GROUP TOPIC [name=value ...]} where the
 * name=value pairs are consumer properties (partition.assignment.strategy,
 * group.instance.id, session.timeout.ms, ...). Commands on stdin: {@code close} closes the
 * consumer and exits 0; {@code halt} exits at once without closing (a crash).
 */
public final class GroupCheck {
  private GroupCheck() {}

  private static PrintStream out;

  private static synchronized void emit(String line) {
    out.println(line);
    out.flush();
  }

  private static String parts(Collection<TopicPartition> tps) {
    TreeSet<Integer> ps = new TreeSet<>();
    for (TopicPartition tp : tps) {
      ps.add(tp.partition());
    }
    List<String> s = new ArrayList<>();
    for (int p : ps) {
      s.add(Integer.toString(p));
    }
    return s.isEmpty() ? "-" : String.join(",", s);
  }

  public static void main(String[] args) throws Exception {
    out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    if (args.length < 4 || !args[0].equals("consume")) {
      System.err.println("usage: GroupCheck consume BOOTSTRAP GROUP TOPIC [name=value ...]");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, args[2]);
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.CLIENT_ID_CONFIG, "moldau-e2e-java-group");
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    for (int i = 4; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
    }
    String topic = args[3];
    KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
    final boolean[] closing = {false};
    Thread stdin =
        new Thread(
            () -> {
              try (BufferedReader in =
                  new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                  line = line.trim();
                  if (line.equals("halt")) {
                    Runtime.getRuntime().halt(0);
                  } else if (line.equals("close")) {
                    break;
                  }
                }
              } catch (Exception e) {
                // stdin gone: close as well
              }
              synchronized (closing) {
                closing[0] = true;
              }
              consumer.wakeup();
            },
            "stdin");
    stdin.setDaemon(true);
    stdin.start();

    ConsumerRebalanceListener listener =
        new ConsumerRebalanceListener() {
          private int gen() {
            try {
              return consumer.groupMetadata().generationId();
            } catch (Exception e) {
              return -2;
            }
          }

          private void owned() {
            emit("OWNED " + gen() + " " + parts(consumer.assignment()));
          }

          @Override
          public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            emit("REVOKED " + gen() + " " + parts(partitions));
          }

          @Override
          public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            emit("ASSIGNED " + gen() + " " + parts(partitions));
            owned();
          }

          @Override
          public void onPartitionsLost(Collection<TopicPartition> partitions) {
            emit("LOST " + gen() + " " + parts(partitions));
          }
        };
    consumer.subscribe(List.of(topic), listener);
    emit("STARTED");
    try {
      while (true) {
        synchronized (closing) {
          if (closing[0]) {
            break;
          }
        }
        ConsumerRecords<byte[], byte[]> recs;
        try {
          recs = consumer.poll(Duration.ofMillis(200));
        } catch (WakeupException e) {
          continue;
        }
        for (ConsumerRecord<byte[], byte[]> r : recs) {
          String v = r.value() == null ? "~" : new String(r.value(), StandardCharsets.UTF_8);
          emit("REC " + r.partition() + " " + r.offset() + " " + v);
        }
        if (!recs.isEmpty()) {
          try {
            consumer.commitSync(Duration.ofSeconds(30));
            emit("COMMITTED");
          } catch (WakeupException e) {
            // closing; the loop ends at the next check
          } catch (Exception e) {
            emit("COMMITFAIL " + e.toString().replace('\n', ' '));
          }
        }
      }
    } finally {
      consumer.close(Duration.ofSeconds(30));
      emit("CLOSED");
    }
  }
}
