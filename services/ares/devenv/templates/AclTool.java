// Creates ACLs through Kafka's own Admin API (kafka-clients is on the broker's classpath):
//   java -cp '<libs>/*' AclTool.java <admin.properties> PRINCIPAL|TYPE|NAME|PATTERN|OPERATION ...
// TYPE: TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER; PATTERN: LITERAL or PREFIXED; ALLOW only.
import java.io.FileReader;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class AclTool {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileReader reader = new FileReader(args[0])) {
            props.load(reader);
        }
        List<AclBinding> bindings = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            String[] f = args[i].split("\\|", -1);
            ResourcePattern pattern = new ResourcePattern(
                ResourceType.valueOf(f[1]), f[2], PatternType.valueOf(f[3]));
            bindings.add(new AclBinding(pattern, new AccessControlEntry(
                f[0], "*", AclOperation.valueOf(f[4]), AclPermissionType.ALLOW)));
        }
        try (Admin admin = Admin.create(props)) {
            admin.createAcls(bindings).all().get();
        }
        System.out.println("created " + bindings.size() + " ACL(s)");
    }
}
