// Client quotas through Kafka's Java Admin client (AlterClientQuotas /
// DescribeClientQuotas) with entity types as given, for what `kafka-configs`
// refuses: it knows only users, clients and ips, while the Admin API sends
// any entity type, e.g. Moldau's `client-id-prefix` extension.
//
// Run as a single-file source program on the kafka-dist class path
// (harness/kafka_tools.py, `client_quotas`):
//   java -cp 'kafka-dist/jars/*' ClientQuotas.java BOOTSTRAP alter TYPE=NAME[,TYPE=NAME] KEY=VALUE|KEY= ...
//     (NAME `<default>` is the default entity; an empty VALUE removes KEY)
//     prints `ok` or `error <ExceptionClass>: <message>`; exits 0 only on ok
//   java -cp 'kafka-dist/jars/*' ClientQuotas.java BOOTSTRAP describe [TYPE=NAME|TYPE ...] [--strict]
//     (TYPE=NAME: EXACT, TYPE alone: SPECIFIED); prints one line per entity:
//     `TYPE=NAME,...<TAB>KEY=VALUE,...` (sorted), or `error ...` and exits 1

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;

public class ClientQuotas {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "moldau-e2e-quotas");
        try (Admin admin = Admin.create(props)) {
            if (args[1].equals("alter")) {
                Map<String, String> parts = new HashMap<>();
                for (String p : args[2].split(",")) {
                    String[] kv = p.split("=", 2);
                    parts.put(kv[0], kv[1].equals("<default>") ? null : kv[1]);
                }
                List<ClientQuotaAlteration.Op> ops = new ArrayList<>();
                for (int i = 3; i < args.length; i++) {
                    String[] kv = args[i].split("=", 2);
                    ops.add(new ClientQuotaAlteration.Op(kv[0], kv[1].isEmpty() ? null : Double.parseDouble(kv[1])));
                }
                admin.alterClientQuotas(List.of(new ClientQuotaAlteration(new ClientQuotaEntity(parts), ops))).all().get();
                System.out.println("ok");
            } else {
                List<ClientQuotaFilterComponent> components = new ArrayList<>();
                boolean strict = false;
                for (int i = 2; i < args.length; i++) {
                    if (args[i].equals("--strict")) {
                        strict = true;
                    } else if (args[i].contains("=")) {
                        String[] kv = args[i].split("=", 2);
                        components.add(ClientQuotaFilterComponent.ofEntity(kv[0], kv[1]));
                    } else {
                        components.add(ClientQuotaFilterComponent.ofEntityType(args[i]));
                    }
                }
                ClientQuotaFilter filter = strict ? ClientQuotaFilter.containsOnly(components) : ClientQuotaFilter.contains(components);
                Map<ClientQuotaEntity, Map<String, Double>> got = admin.describeClientQuotas(filter).entities().get();
                List<String> lines = new ArrayList<>();
                for (Map.Entry<ClientQuotaEntity, Map<String, Double>> e : got.entrySet()) {
                    List<String> parts = new ArrayList<>();
                    for (Map.Entry<String, String> p : new TreeMap<>(e.getKey().entries()).entrySet()) {
                        parts.add(p.getKey() + "=" + (p.getValue() == null ? "<default>" : p.getValue()));
                    }
                    List<String> values = new ArrayList<>();
                    for (Map.Entry<String, Double> v : new TreeMap<>(e.getValue()).entrySet()) {
                        values.add(v.getKey() + "=" + v.getValue());
                    }
                    lines.add(String.join(",", parts) + "\t" + String.join(",", values));
                }
                lines.sort(null);
                lines.forEach(System.out::println);
            }
        } catch (ExecutionException x) {
            Throwable c = x.getCause();
            System.out.println("error " + c.getClass().getSimpleName() + ": " + c.getMessage());
            System.exit(1);
        }
    }
}
