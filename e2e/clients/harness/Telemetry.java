// A Java producer pushing its own metrics (KIP-714, `enable.metrics.push`,
// on by default) while it produces: one record every 100 ms for SECONDS,
// then close(), whose last push is the terminating one.
//
// Run as a single-file source program on the kafka-dist class path
// (harness/kafka_tools.py, `telemetry_producer`):
//   java -cp 'kafka-dist/jars/*' Telemetry.java BOOTSTRAP TOPIC CLIENT_ID SECONDS
//     prints `client-instance-id<TAB>UUID` (the id the broker assigned,
//     through the client's clientInstanceId()), then `done`.

import java.time.Duration;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class Telemetry {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, args[2]);
        props.put(ProducerConfig.ENABLE_METRICS_PUSH_CONFIG, "true");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        long until = System.currentTimeMillis() + Long.parseLong(args[3]) * 1000;
        try (KafkaProducer<String, String> p = new KafkaProducer<>(props)) {
            p.send(new ProducerRecord<>(args[1], "k", "first")).get();
            System.out.printf("client-instance-id\t%s%n", p.clientInstanceId(Duration.ofSeconds(30)));
            System.out.flush();
            while (System.currentTimeMillis() < until) {
                p.send(new ProducerRecord<>(args[1], "k", "v")).get();
                Thread.sleep(100);
            }
        }
        System.out.println("done");
    }
}
