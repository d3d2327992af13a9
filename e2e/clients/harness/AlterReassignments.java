// Starts partition reassignments through Kafka's Java Admin client
// (AlterPartitionReassignments), for what `kafka-reassign-partitions
// --execute` refuses to do: the tool first checks every target broker
// against DescribeCluster, which lists only live brokers, so a move onto a
// stopped (but registered) broker can only be started through the Admin
// API, as in Apache Kafka.
//
// Run as a single-file source program on the kafka-dist class path
// (harness/kafka_tools.py, `alter_reassignments`):
//   java -cp 'kafka-dist/jars/*' AlterReassignments.java BOOTSTRAP TOPIC:PARTITION:R1,R2,R3 ...
// Prints `TOPIC-PARTITION: ok` or `TOPIC-PARTITION: error <ExceptionClass>: <message>`
// per partition; exits 0 only when every partition was accepted.

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;

public class AlterReassignments {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "moldau-e2e-reassign");
        Map<TopicPartition, Optional<NewPartitionReassignment>> moves = new LinkedHashMap<>();
        for (int i = 1; i < args.length; i++) {
            String[] f = args[i].split(":");
            List<Integer> replicas = new ArrayList<>();
            for (String r : f[2].split(",")) {
                replicas.add(Integer.parseInt(r));
            }
            moves.put(new TopicPartition(f[0], Integer.parseInt(f[1])), Optional.of(new NewPartitionReassignment(replicas)));
        }
        boolean ok = true;
        try (Admin admin = Admin.create(props)) {
            for (Map.Entry<TopicPartition, KafkaFuture<Void>> e : admin.alterPartitionReassignments(moves).values().entrySet()) {
                try {
                    e.getValue().get();
                    System.out.println(e.getKey() + ": ok");
                } catch (ExecutionException x) {
                    ok = false;
                    Throwable c = x.getCause();
                    System.out.println(e.getKey() + ": error " + c.getClass().getSimpleName() + ": " + c.getMessage());
                }
            }
        }
        System.exit(ok ? 0 : 1);
    }
}
