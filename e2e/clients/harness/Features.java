// The cluster's feature levels (KIP-584) through Kafka's Java Admin client
// (`describeFeatures`, i.e. ApiVersions v3), printed as numbers: what
// `kafka-features describe` prints, without its mapping of a
// `metadata.version` level to a release name (a tool older than the level
// prints "UNKNOWN 33"), so that a test can compare levels on any target.
//
// Run as a single-file source program on the kafka-dist class path
// (harness/kafka_tools.py, `feature_levels`):
//   java -cp 'kafka-dist/jars/*' Features.java BOOTSTRAP
//     prints one line per supported feature, sorted:
//     `NAME<TAB>MIN<TAB>MAX<TAB>FINALIZED<TAB>EPOCH` (FINALIZED 0 when the
//     feature is not finalized, EPOCH -1 when unknown)

import java.util.Properties;
import java.util.TreeMap;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.SupportedVersionRange;

public class Features {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "moldau-e2e-features");
        try (Admin admin = Admin.create(props)) {
            FeatureMetadata m = admin.describeFeatures().featureMetadata().get();
            long epoch = m.finalizedFeaturesEpoch().orElse(-1L);
            for (var e : new TreeMap<>(m.supportedFeatures()).entrySet()) {
                SupportedVersionRange s = e.getValue();
                FinalizedVersionRange f = m.finalizedFeatures().get(e.getKey());
                System.out.printf("%s\t%d\t%d\t%d\t%d%n", e.getKey(), s.minVersion(), s.maxVersion(),
                        f == null ? 0 : f.maxVersionLevel(), epoch);
            }
        }
    }
}
